"""vLLM running a pooling model (`-- --runner pooling`) as rotor's Embedder,
or as its Scorer when the model is a cross-encoder.

What rotor reads from vLLM: its `ModelConfig` for the engine args (built
before the engine starts, so the card the frontend checks against is right
from the first request): `runner_type` "pooling" makes the model a pooling
model (`generates` False); its `score_type` "cross-encoder" (a
`...ForSequenceClassification` checkpoint, or vLLM's `--convert classify`)
with one label (`num_labels` 1, as vLLM's own scoring API requires) makes it
a cross-encoder (`scores_pairs`); otherwise it is an embedding model:
`embedding_size` (the hidden size, or a sentence-transformers projection's
output) is the card's `embedding_dim`, and `is_matryoshka` (config.json's
`matryoshka_dimensions` or `is_matryoshka`) allows a shorter `dimensions`.
Once started, vLLM's supported tasks must include "classify" for a
cross-encoder, "embed" for an embedding model.

Each input (or pair) is one `AsyncLLM.encode` (a `TokensPrompt`, and
`PoolingParams` with task "embed" and the request's `dimensions`, or task
"classify" with where the pair's second text starts as vLLM's own scoring
passes token types: `extra_kwargs["compressed_token_type_ids"]`), all of
them run together; vLLM batches them (for embeddings truncates to
`dimensions` and normalises; for a pair applies the classifier's activation,
a sigmoid for one label, as its scoring API does). A failure of one aborts
the others.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from rotor.protocol.engine import EngineError
from rotor.protocol.scores import ScorePair


@dataclass(frozen=True, slots=True)
class Pooling:
    """What vLLM makes of a pooling model."""

    embedding_dim: int  # 0: a cross-encoder, which does not embed
    matryoshka: bool  # vLLM takes a `dimensions` below embedding_dim
    scores_pairs: bool = False  # a cross-encoder (one label)


def pooling_of(args: Any) -> Pooling | None:
    """The pooling model vLLM's engine args describe (None: it runs the
    model for generation). ValueError for a pooling runner rotor cannot serve."""
    if args.runner == "generate":
        return None
    try:
        config = args.create_model_config()
    except Exception:  # a model vLLM cannot load: starting the engine says why
        return None
    if config.runner_type != "pooling":
        return None
    if config.score_type == "cross-encoder":
        labels = getattr(config.hf_config, "num_labels", 0)
        if labels != 1:
            raise ValueError(
                f"vLLM runs the model to classify (--convert classify, or a sequence "
                f"classifier) into {labels} labels: rotor serves one-label classifiers only, "
                "as cross-encoders (/v1/score, /v1/rerank)"
            )
        return Pooling(0, False, scores_pairs=True)
    if config.score_type != "bi-encoder":
        raise ValueError(
            f"vLLM runs the model as a {config.score_type} pooling model: rotor serves "
            "embedding models and cross-encoders only"
        )
    return Pooling(int(config.embedding_size), bool(config.is_matryoshka))


async def check_pooling(llm: Any, pooling: Pooling) -> None:
    """RuntimeError when the started engine does not pool as the card says."""
    tasks = tuple(await llm.get_supported_tasks())
    task, what = ("classify", "scoring pairs") if pooling.scores_pairs else ("embed", "embeddings")
    if task not in tasks:
        raise RuntimeError(
            f"vLLM runs the model for pooling but not for {what} (its tasks: "
            f"{', '.join(tasks) or 'none'})"
        )


async def embed(
    llm: Any, inputs: list[list[int]], dimensions: int | None, running: set[str]
) -> list[list[float]]:
    """Each input's vector from vLLM, in order; the request ids are in
    `running` meanwhile."""
    if llm is None:
        raise EngineError("the vLLM engine is not started", "unavailable")
    if llm.errored:
        raise EngineError("the vLLM engine is dead", "unavailable")
    base = f"embed-{uuid.uuid4().hex}"
    tasks = [
        asyncio.ensure_future(_one(llm, ids, dimensions, f"{base}-{i}", running))
        for i, ids in enumerate(inputs)
    ]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()  # (a cancelled encode aborts its request in vLLM)
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _one(
    llm: Any, ids: list[int], dimensions: int | None, rid: str, running: set[str]
) -> list[float]:
    from vllm.exceptions import VLLMClientError
    from vllm.inputs import TokensPrompt
    from vllm.pooling_params import PoolingParams
    from vllm.v1.engine.exceptions import EngineDeadError

    if not ids:
        raise EngineError("input: an input is empty", "refused", "input")
    params = PoolingParams(task="embed", dimensions=dimensions)
    running.add(rid)
    last = None
    try:
        async for out in llm.encode(TokensPrompt(prompt_token_ids=list(ids)), params, rid):
            last = out
    except EngineDeadError as e:
        raise EngineError(f"the vLLM engine died: {e}", "unavailable") from None
    except (VLLMClientError, ValueError) as e:  # vLLM's validation of the request
        raise EngineError(str(e), "refused", _param(e)) from None
    finally:
        running.discard(rid)
    if last is None or last.error is not None:
        why = "no output" if last is None else last.error.message
        raise EngineError(f"vLLM did not embed the input: {why}", "internal")
    return last.outputs.data.tolist()  # a 1-D tensor of the vector's numbers


async def score(llm: Any, pairs: list[ScorePair], running: set[str]) -> list[float]:
    """Each pair's score from vLLM's classifier, in order; the request ids
    are in `running` meanwhile."""
    if llm is None:
        raise EngineError("the vLLM engine is not started", "unavailable")
    if llm.errored:
        raise EngineError("the vLLM engine is dead", "unavailable")
    base = f"score-{uuid.uuid4().hex}"
    tasks = [
        asyncio.ensure_future(_one_pair(llm, pair, f"{base}-{i}", running))
        for i, pair in enumerate(pairs)
    ]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _one_pair(llm: Any, pair: ScorePair, rid: str, running: set[str]) -> float:
    from vllm.exceptions import VLLMClientError
    from vllm.inputs import TokensPrompt
    from vllm.pooling_params import PoolingParams
    from vllm.v1.engine.exceptions import EngineDeadError

    params = PoolingParams(task="classify")
    if pair.type_start is not None:  # where token type 1 starts (vLLM's scoring does the same)
        params.extra_kwargs = {"compressed_token_type_ids": pair.type_start}
    running.add(rid)
    last = None
    try:
        async for out in llm.encode(
            TokensPrompt(prompt_token_ids=list(pair.token_ids)), params, rid
        ):
            last = out
    except EngineDeadError as e:
        raise EngineError(f"the vLLM engine died: {e}", "unavailable") from None
    except (VLLMClientError, ValueError) as e:
        raise EngineError(str(e), "refused", "documents") from None
    finally:
        running.discard(rid)
    if last is None or last.error is not None:
        why = "no output" if last is None else last.error.message
        raise EngineError(f"vLLM did not score the pair: {why}", "internal")
    return float(last.outputs.data[0])  # a 1-D tensor of the one label's score


def _param(error: Exception) -> str:
    """The request field a refusal is about: `dimensions` or the input."""
    named = getattr(error, "parameter", None)
    message = str(error)
    if named == "dimensions" or "dimensions" in message or "Matryoshka" in message:
        return "dimensions"
    return "input"
