"""The scoring requests of pooling models, in the shapes vLLM serves them:
`POST /v1/score` (`ScoreRequest`) and `POST /v1/rerank` (`RerankRequest`,
Jina's and Cohere's shape), and a pair as it goes to an engine (`ScorePair`).

A score request names its two sides in any of vLLM's spellings — `queries`
and `documents`, `queries` and `items`, `data_1` and `data_2`, `text_1` and
`text_2` — each a text or a list of texts: one text on the first side is
scored against every text on the second (1:N), otherwise they pair up in
order (N:N). Which spelling, and that there is exactly one, is checked by
pipeline/score.py (a 400 naming the field). A rerank request is one `query`
and its `documents`. Unknown fields are a 400 naming them, like every other
request.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_TEXTS = 1000  # texts on one side of a request (Cohere's limit of documents)

Texts = str | list[str]

# The spellings of a score request's two sides, in vLLM's order of trying them.
SIDES = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


def _checked(v: Any) -> Any:
    texts = [v] if isinstance(v, str) else v
    if not texts:
        raise ValueError("must not be empty")
    if len(texts) > MAX_TEXTS:
        raise ValueError(f"at most {MAX_TEXTS} texts in one request, got {len(texts)}")
    return v


def as_list(v: Texts) -> list[str]:
    return [v] if isinstance(v, str) else list(v)


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    queries: Texts | None = None
    documents: Texts | None = None
    items: Texts | None = None
    data_1: Texts | None = None
    data_2: Texts | None = None
    text_1: Texts | None = None
    text_2: Texts | None = None
    user: str | None = None

    @field_validator("queries", "documents", "items", "data_1", "data_2", "text_1", "text_2")
    @classmethod
    def _side(cls, v: Any) -> Any:
        return v if v is None else _checked(v)

    def given(self) -> list[str]:
        """The side fields the request set, in declaration order."""
        names = dict.fromkeys(n for pair in SIDES for n in pair)
        return [n for n in names if getattr(self, n) is not None]


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    query: str
    documents: Texts
    # the best `top_n` results (0: all of them, as vLLM takes it; more than
    # there are documents: all of them)
    top_n: int = Field(default=0, ge=0)
    # each result carries its document's text (Cohere's and Jina's switch;
    # vLLM always returns them)
    return_documents: bool = True
    user: str | None = None

    @field_validator("documents")
    @classmethod
    def _documents(cls, v: Any) -> Any:
        return _checked(v)


class ScorePair(NamedTuple):
    """One (query, document) pair as a cross-encoder reads it: the pair's
    token ids, and where the second text's tokens (token type 1) start —
    None when the model's tokenizer gives no token types."""

    token_ids: list[int]
    type_start: int | None = None
