"""What a stored response's record holds, and its bytes (store.py keeps them
opaque).

A record is the response object exactly as it was returned (or as far as it
got: `queued`, `in_progress`) and the conversation the model saw before its
output: the input items of every earlier turn of its chain and their
outputs, then this request's input, each item with an id (`chain.py`). The
record is flattened, not linked: the next turn reads one record, and a
chain goes on when an earlier response in it is deleted. `instructions` are
in the response object only; they are not part of the conversation (OpenAI
does not carry them to the next turn).

The bytes are JSON: `{"format": 1, "response": {...}, "input": [...]}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

FORMAT = 1

# A response whose status is one of these will not change again.
FINISHED = frozenset({"completed", "incomplete", "failed", "cancelled"})


@dataclass
class Record:
    response: dict[str, Any]  # the response object, as returned
    input: list[dict[str, Any]]  # the conversation before its output, oldest first

    @property
    def id(self) -> str:
        return str(self.response["id"])

    @property
    def status(self) -> str:
        return str(self.response["status"])

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def background(self) -> bool:
        return bool(self.response.get("background"))

    def conversation(self) -> list[dict[str, Any]]:
        """What the next turn continues: the input, then this response's output."""
        return [*self.input, *self.response["output"]]


def encode(record: Record) -> bytes:
    return orjson.dumps({"format": FORMAT, "response": record.response, "input": record.input})


def decode(data: bytes) -> Record:
    """The record of `encode`'s bytes; ValueError for bytes that are not one."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"a stored response is not JSON: {e}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise ValueError(f"a stored response is not a format {FORMAT} record: {found!r}")
    response, items = raw.get("response"), raw.get("input")
    if not isinstance(response, dict) or not isinstance(items, list):
        raise ValueError("a stored response lacks its response or its input")
    return Record(response, items)
