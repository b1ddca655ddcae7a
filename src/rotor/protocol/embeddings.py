"""OpenAI's embeddings request (`POST /v1/embeddings`) and its validation.

`input` is a string, a list of strings, a list of token ids, or a list of
lists of token ids, as OpenAI takes it; each is one input, embedded on its
own. Unknown fields are a 400 naming them, like every other request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from typing_extensions import TypeIs

MAX_INPUTS = 2048  # inputs in one request (OpenAI's own limit)

Inputs = str | list[str] | list[int] | list[list[int]]


def _one_of_token_ids(v: list[str] | list[int] | list[list[int]]) -> TypeIs[list[int]]:
    """A list of token ids is one input; a validated list holds one type of item."""
    return bool(v) and isinstance(v[0], int)


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    input: Inputs
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None

    @field_validator("input")
    @classmethod
    def _input(cls, v: Any) -> Any:
        inputs = [v] if isinstance(v, str) or (v and isinstance(v[0], int)) else v
        if not inputs:
            raise ValueError("must not be empty")
        if len(inputs) > MAX_INPUTS:
            raise ValueError(f"at most {MAX_INPUTS} inputs in one request, got {len(inputs)}")
        for i, one in enumerate(inputs):
            if not one:
                raise ValueError(f"input {i} is empty")
            if isinstance(one, list) and any(t < 0 for t in one):
                raise ValueError(f"input {i}: token ids must not be negative")
        return v

    def inputs(self) -> list[str | list[int]]:
        """Each input on its own: text, or token ids."""
        v = self.input
        if isinstance(v, str):
            return [v]
        if _one_of_token_ids(v):
            return [v]
        return list(v)
