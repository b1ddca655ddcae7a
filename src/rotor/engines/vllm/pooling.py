"""vLLM running a pooling model (`-- --runner pooling`) as rotor's Embedder.

What rotor reads from vLLM: its `ModelConfig` for the engine args (built
before the engine starts, so the card the frontend checks against is right
from the first request): `runner_type` "pooling" makes the model an
embedding model (`generates` False), `embedding_size` (the hidden size, or a
sentence-transformers projection's output) is the card's `embedding_dim`,
and `is_matryoshka` (config.json's `matryoshka_dimensions` or
`is_matryoshka`) allows a shorter `dimensions`. Once started, vLLM's
supported tasks must include "embed".

Each input is one `AsyncLLM.encode` (a `TokensPrompt`, `PoolingParams` with
task "embed" and the request's `dimensions`), all of them run together; vLLM
batches them, truncates to `dimensions` and normalises. A failure of one
aborts the others.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from rotor.protocol.engine import EngineError


@dataclass(frozen=True, slots=True)
class Pooling:
    """What vLLM makes of a pooling model."""

    embedding_dim: int
    matryoshka: bool  # vLLM takes a `dimensions` below embedding_dim


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
    if config.convert_type == "classify":
        raise ValueError(
            "vLLM option --convert classify: rotor serves pooling models for embeddings only"
        )
    return Pooling(int(config.embedding_size), bool(config.is_matryoshka))


async def check_embeds(llm: Any) -> None:
    """RuntimeError when the started engine does not embed (a classifier, say)."""
    tasks = tuple(await llm.get_supported_tasks())
    if "embed" not in tasks:
        raise RuntimeError(
            f"vLLM runs the model for pooling but not for embeddings (its tasks: "
            f"{', '.join(tasks) or 'none'}); rotor serves embedding models only"
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


def _param(error: Exception) -> str:
    """The request field a refusal is about: `dimensions` or the input."""
    named = getattr(error, "parameter", None)
    message = str(error)
    if named == "dimensions" or "dimensions" in message or "Matryoshka" in message:
        return "dimensions"
    return "input"
