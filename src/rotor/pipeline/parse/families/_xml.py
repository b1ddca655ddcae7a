"""Small scanning helpers for the XML-ish families (qwen3_coder, glm45,
minimax_m2). They read a complete section body left to right and answer None
at the first thing that is not the family's markup, so a family can treat the
whole section as malformed (released as content) instead of guessing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rotor.pipeline.parse.base import ToolCall, Tools, plain_name, skip_space
from rotor.pipeline.parse.jsonutil import dumps_args, typed_value


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


def elements(text: str, open_prefix: str, close_tag: str) -> list[tuple[str, str]] | None:
    """The `open_prefix head>inner close_tag` elements `text` is made of, as
    (head, inner) in order; only whitespace may lie around and between them.
    None at the first thing that is not such an element, or one left open."""
    found: list[tuple[str, str]] = []
    i, n = skip_space(text), len(text)
    while i < n:
        head = tag_head(text, i, open_prefix)
        if head is None:
            return None
        end = text.find(close_tag, head[1])
        if end < 0:
            return None
        found.append((head[0], text[head[1] : end]))
        i = skip_space(text, end + len(close_tag))
    return found


def attr_name(head: str) -> str | None:
    """` name="f"` (or single-quoted, or bare) → f; the head of `<tag name=…>`
    after the tag's name, so it opens with a space or a tab."""
    if head[:1] not in (" ", "\t"):
        return None
    head = head.strip()
    if not head.startswith("name="):
        return None
    value = head[len("name=") :].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return plain_name(value)


def typed_arguments(
    tools: Tools,
    tool: str,
    pairs: list[tuple[str, str]],
    typing: Callable[[str, dict[str, Any] | None], Any] = typed_value,
) -> str:
    """The `arguments` JSON of a call whose values arrived as text: each value
    typed by its declared schema (`typing`), a string when none is declared."""
    args: dict[str, Any] = {}
    for key, value in pairs:
        args[key] = typing(value, tools.param_schema(tool, key))
    return dumps_args(args)


def element_calls(
    tools: Tools,
    body: str,
    open_prefix: str,
    close_tag: str,
    name_of: Callable[[str], str | None],
    params_of: Callable[[str], list[tuple[str, str]] | None],
    typing: Callable[[str, dict[str, Any] | None], Any] = typed_value,
) -> list[ToolCall] | None:
    """One call per element of `body` (`<open_prefix…>params</close_tag>`, only
    whitespace between): its name from the head, its parameters typed by the
    tool's schema. None when anything in the body is not that."""
    found = elements(body, open_prefix, close_tag)
    if not found:
        return None
    calls: list[ToolCall] = []
    for head, inner in found:
        name = name_of(head)
        pairs = params_of(inner)
        if name is None or pairs is None:
            return None
        calls.append(ToolCall(name=name, arguments=typed_arguments(tools, name, pairs, typing)))
    return calls
