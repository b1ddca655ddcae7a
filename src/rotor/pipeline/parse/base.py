"""What a parser emits and the two parser interfaces (tool calls, reasoning).

A parser is one small state machine per choice. `feed` takes the next text
delta and returns message pieces; `finish` flushes at the end of the choice.
Any split of the same text into deltas must produce the same pieces once
merged (adjacent Content / Reasoning joined) — the property tests check that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(slots=True)
class Content:
    text: str


@dataclass(slots=True)
class Reasoning:
    text: str


@dataclass(slots=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, serialised
    id: str | None = None  # only families that carry their own id (kimi_k2) set it


Piece = Content | Reasoning | ToolCall


class ParseError(Exception):
    """Output that the request's grammar forbids (Beam under its turn grammar only).

    Other families never raise: malformed markup falls back to content.
    `detail` is what a client may be told: what is wrong with the output, never
    internal state (whether a grammar was installed, how the choice ended)."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail if detail is not None else message


class Tools:
    """The tools a request declared: name → JSON schema of its parameters.
    `calls` False: nothing may be called at all (`tool_choice: "none"`), for
    the families whose parser runs even then (harmony, beam)."""

    __slots__ = ("schemas", "calls")

    def __init__(
        self, schemas: dict[str, dict[str, Any]] | None = None, calls: bool = True
    ) -> None:
        self.schemas: dict[str, dict[str, Any]] = schemas or {}
        self.calls = calls

    @classmethod
    def forbidden(cls) -> Tools:
        """No tools, and no call may be returned (`tool_choice: "none"`)."""
        return cls(calls=False)

    @classmethod
    def from_openai(cls, tools: list[dict[str, Any]] | None) -> Tools:
        """From OpenAI `tools` (`{"type":"function","function":{name, parameters}}`)."""
        schemas: dict[str, dict[str, Any]] = {}
        for tool in tools or []:
            fn = tool.get("function", tool)
            schemas[fn["name"]] = fn.get("parameters") or {}
        return cls(schemas)

    def __contains__(self, name: str) -> bool:
        return name in self.schemas

    def __bool__(self) -> bool:
        return bool(self.schemas)

    def param_schema(self, tool: str, param: str) -> dict[str, Any] | None:
        """The JSON schema of one parameter, or None when undeclared."""
        props = self.schemas.get(tool, {}).get("properties")
        if isinstance(props, dict):
            schema = props.get(param)
            if isinstance(schema, dict):
                return schema
        return None


class ToolParser:
    """Turns a choice's text into content and complete tool calls.

    Class attributes tell preprocess what the family needs from the decoder.
    """

    name: ClassVar[str] = ""
    # Markers are special tokens: decode with skip_special_tokens=False by default.
    needs_special_tokens: ClassVar[bool] = False
    # Token texts that end generation but must still reach the parser when tools
    # are active (harmony / beam `<|call|>`).
    visible_stop_markers: ClassVar[tuple[str, ...]] = ()
    # Hand the EOS token's text to the parser on confirmed MODEL_EOS.
    wants_eos_text: ClassVar[bool] = False
    # The family parses reasoning itself (harmony, beam): no reasoning parser runs.
    handles_reasoning: ClassVar[bool] = False
    # Where a call begins, as a reasoning parser should spot it inside a think
    # block the model never closed; None: the family's `start_markers` (if any).
    call_starts: ClassVar[tuple[str, ...] | None] = None

    def __init__(self, tools: Tools) -> None:
        self.tools = tools

    def feed(self, text: str) -> list[Piece]:
        raise NotImplementedError

    def finish(self) -> list[Piece]:
        """Lenient end: unterminated-but-complete calls are recovered, other
        leftover markup is released as content."""
        raise NotImplementedError

    def finish_at_eos(self) -> list[Piece]:
        """Strict end, only under confirmed model EOS with a turn grammar installed."""
        return self.finish()

    def reasoning_exits(self) -> tuple[str, ...]:
        """The markers that end an unclosed think block (`call_starts`)."""
        if self.call_starts is not None:
            return self.call_starts
        return tuple(getattr(self, "start_markers", ()))


class ReasoningParser:
    """Splits a choice's text into reasoning and content."""

    name: ClassVar[str] = ""
    start_tag: ClassVar[str] = ""
    # The model begins inside reasoning even when the prompt does not end with
    # the start tag (its template opens the block for it).
    starts_inside: ClassVar[bool] = False

    def __init__(self, inside: bool) -> None:
        self.inside = inside

    @classmethod
    def markers(cls) -> tuple[str, ...]:
        """Every tag text the parser reads: those written with special tokens
        must reach it even when special tokens are skipped."""
        return (cls.start_tag,) if cls.start_tag else ()

    def exit_at(self, markers: tuple[str, ...]) -> None:
        """The tool parser's call-start markers: one inside a block that is never
        closed ends the reasoning there. A parser that cannot honour it ignores it."""

    def feed(self, text: str) -> list[Piece]:
        raise NotImplementedError

    def finish(self) -> list[Piece]:
        raise NotImplementedError


def partial_marker_len(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of a marker.

    That suffix is held back: it might still become a marker. Only the places
    where a marker's first character sits near the end are candidates; the
    earliest that fits is the longest."""
    n = len(text)
    best = 0
    for marker in markers:
        if not marker:
            continue
        first = marker[0]
        # A candidate suffix is shorter than the marker and longer than `best`.
        stop = n - best
        s = text.find(first, max(0, n - len(marker) + 1), stop)
        while s >= 0:
            if marker.startswith(text[s:]):
                best = n - s
                break
            s = text.find(first, s + 1, stop)
    return best


def trim_partial(text: str, markers: tuple[str, ...]) -> str:
    """`text` less a trailing proper prefix of one of `markers`: at the end of
    a stream the model may have stopped halfway through writing one."""
    cut = partial_marker_len(text, markers)
    return text[: len(text) - cut] if cut else text


def earliest(text: str, markers: tuple[str, ...], start: int = 0) -> tuple[int, str | None]:
    """The first of `markers` in `text` at or after `start`, and where it is
    ((-1, None) when there is none). Of two at the same place, the one listed first."""
    best, found = -1, None
    for marker in markers:
        i = text.find(marker, start)
        if i >= 0 and (best < 0 or i < best):
            best, found = i, marker
    return best, found


_SPACE_RUN = re.compile(r"\s*")  # `\s` is exactly `str.isspace`


def skip_space(text: str, i: int = 0) -> int:
    """Index of the first non-whitespace character at or after `i` (len(text) if none)."""
    if i >= len(text) or not text[i].isspace():
        return i  # the usual case: nothing to skip
    match = _SPACE_RUN.match(text, i)
    return match.end() if match else i


def plain_name(text: str) -> str | None:
    """A function or parameter name: one token once the surrounding space is
    gone, no whitespace or markup (`<`, `>`) inside; None otherwise."""
    name = text.strip()
    if not name or "<" in name or ">" in name or any(c.isspace() for c in name):
        return None
    return name
