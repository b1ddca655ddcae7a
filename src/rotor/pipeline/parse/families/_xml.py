"""Small scanning helpers for the XML-ish families (qwen3_coder, glm45,
minimax_m2). They read a complete section body left to right and answer None
at the first thing that is not the family's markup, so a family can treat the
whole section as malformed (released as content) instead of guessing."""

from __future__ import annotations

from typing import Any

from rotor.pipeline.parse.base import Tools, partial_marker_len
from rotor.pipeline.parse.jsonutil import dumps_args, typed_value

_WS = " \t\r\n"


def skip_ws(text: str, i: int) -> int:
    """Index of the first non-whitespace character at or after `i`."""
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


def take(text: str, i: int, open_tag: str, close_tag: str) -> tuple[str, int] | None:
    """At `i`, `open_tag` inner `close_tag` → (inner, index past close_tag)."""
    if not text.startswith(open_tag, i):
        return None
    start = i + len(open_tag)
    end = text.find(close_tag, start)
    if end < 0:
        return None
    return text[start:end], end + len(close_tag)


def tag_head(text: str, i: int, prefix: str) -> tuple[str, int] | None:
    """At `i`, `prefix` head `>` → (head, index past `>`); the head is what a
    tag carries (a name, an attribute), never spanning lines."""
    if not text.startswith(prefix, i):
        return None
    start = i + len(prefix)
    gt = text.find(">", start)
    if gt < 0:
        return None
    head = text[start:gt]
    if "\n" in head or "<" in head:
        return None
    return head, gt + 1


def plain_name(text: str) -> str | None:
    """A function or parameter name: one token, no markup."""
    name = text.strip()
    if not name or any(c in name for c in " \t\r\n<>"):
        return None
    return name


def attr_name(head: str) -> str | None:
    """`name="f"` (or single-quoted, or bare) → f."""
    head = head.strip()
    if not head.startswith("name="):
        return None
    value = head[len("name=") :].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return plain_name(value)


def trim_partial(body: str, marker: str) -> str:
    """`body` without a trailing proper prefix of `marker`: at the end of the
    stream, a half-written end marker says nothing about the call before it."""
    keep = partial_marker_len(body, (marker,))
    return body[: len(body) - keep] if keep else body


def typed_arguments(tools: Tools, tool: str, pairs: list[tuple[str, str]]) -> str:
    """The `arguments` JSON of a call whose values arrived as text: each value
    typed by its declared schema, a string when none is declared."""
    args: dict[str, Any] = {}
    for key, value in pairs:
        args[key] = typed_value(value, tools.param_schema(tool, key))
    return dumps_args(args)
