"""An embeddings request made ready for an engine: each input as token ids,
checked against the model before any engine sees it — a model that cannot
embed, a `dimensions` it cannot give, an input past the context length (400s
naming the field, and for an input its index)."""

from __future__ import annotations

import base64
import sys
from array import array
from dataclasses import dataclass

from rotor.pipeline.bounds import check_prompt_size
from rotor.pipeline.errors import RequestError
from rotor.pipeline.served import ServedModel
from rotor.protocol.embeddings import EmbeddingRequest


@dataclass(frozen=True)
class EmbeddingInputs:
    token_ids: list[list[int]]
    dimensions: int | None

    @property
    def prompt_tokens(self) -> int:
        return sum(len(ids) for ids in self.token_ids)


def prepare_embedding(model: ServedModel, req: EmbeddingRequest) -> EmbeddingInputs:
    card, tok = model.card, model.tokenizer
    caps = card.capabilities
    if caps.embedding_dim == 0:
        what = (
            "it is a cross-encoder, which serves /v1/score and /v1/rerank"
            if caps.scores_pairs
            else "it is served for generation"
        )
        raise RequestError(f"the model {card.name!r} cannot embed: {what}", "model")
    dimensions = req.dimensions
    if dimensions is not None and dimensions != caps.embedding_dim:
        if not caps.shortens_embeddings:
            raise RequestError(
                f"the model {card.name!r} gives {caps.embedding_dim} dimensions and cannot "
                f"give {dimensions}",
                "dimensions",
            )
        if dimensions > caps.embedding_dim:
            raise RequestError(
                f"dimensions {dimensions} is more than the model's {caps.embedding_dim}",
                "dimensions",
            )
    if tok is None:
        raise RequestError(f"the model {card.name!r} has no tokenizer to embed with", "model")
    context = card.context_length
    token_ids: list[list[int]] = []
    for i, one in enumerate(req.inputs()):
        if isinstance(one, str):
            check_prompt_size(model, f"input {i}", "input", one)
            ids = tok.encode(one, add_special_tokens=True)
        else:
            if any(t >= tok.vocab_size for t in one):
                raise RequestError(
                    f"input {i} has token ids outside [0, {tok.vocab_size})", "input"
                )
            ids = list(one)
        if len(ids) > context:
            raise RequestError(
                f"input {i} is {len(ids)} tokens, more than the model's context length of "
                f"{context} tokens",
                "input",
            )
        token_ids.append(ids)
    full = dimensions is None or dimensions == caps.embedding_dim
    return EmbeddingInputs(token_ids, None if full else dimensions)


def refuse_generation(model: ServedModel) -> None:
    """RequestError when the model only pools (chat and completions need a generator)."""
    caps = model.card.capabilities
    if caps.generates:
        return
    if caps.scores_pairs:
        what = "a cross-encoder: it serves /v1/score and /v1/rerank only"
    else:
        what = "an embedding model: it serves /v1/embeddings, /v1/score and /v1/rerank only"
    raise RequestError(f"the model {model.card.name!r} is {what}", "model")


def encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    """A vector as the client asked: numbers, or base64 of little-endian float32s (OpenAI's)."""
    if encoding_format == "float":
        return vector
    packed = array("f", vector)  # float32 (4 bytes on every platform CPython supports)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")
