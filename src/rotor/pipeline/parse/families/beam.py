"""beam — Harmony framing with flat XML parameters, served under a turn grammar.

    <|channel|>analysis<|message|>…<|end|>                                   → reasoning
    <|channel|>final<|message|>…<|return|> (or <|end|>)                      → content
    [<|start|>assistant] to=NAME<|channel|>analysis [<|constrain|>xml]<|message|>
        <rfl:parameter name="K">V</rfl:parameter>…  <|call|> (or <|end|>)    → call NAME

The segment machine is Harmony's; this file adds the parameter body and the
two endings of `docs/beam.md`. `finish()` is lenient: an unterminated complete
body is recovered, a broken one is dropped (markup never reaches the client).
`finish_at_eos()` is strict, for confirmed model EOS under the grammar: every
deviation from the grammar seen in the turn is a `ParseError`. Deviations are
noted as they happen; once one is noted, later calls are held back until the
end so that no call goes out ahead of the error.

When nothing may be called (`tool_choice: "none"`), a call the model writes
anyway is read as before, and its arguments, as the JSON object the call
would have carried, are text of the segment's channel (analysis: reasoning).
Its markup never reaches the client. Without tools (and no `none`), such a
call is returned, as a call to an undeclared tool.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rotor.pipeline.parse.base import Content, ParseError, Piece, ToolCall, Tools, skip_space
from rotor.pipeline.parse.families.harmony import (
    BODY,
    CALL,
    CONSTRAIN,
    END,
    HEAD,
    MESSAGE,
    RETURN,
    TEXT,
    HarmonyParser,
    header_parts,
)
from rotor.pipeline.parse.jsonutil import dumps_args, typed_value

PARAM_OPEN = '<rfl:parameter name="'
PARAM_CLOSE = "</rfl:parameter>"

_TEXT_HEADER = re.compile(r"(?:<\|start\|>assistant)?<\|channel\|>(?:analysis|final)")
_CALL_HEADER = re.compile(
    r"(?:<\|start\|>assistant)? ?to=(.+?)<\|channel\|>analysis(?: <\|constrain\|>xml)?", re.S
)
# Error messages may reach the client: they name markers in words, never quote them.
_WORDS = {END: "end", CALL: "call", RETURN: "return", MESSAGE: "message", CONSTRAIN: "constrain"}


def shown(name: str) -> str:
    """A tool name fit for an error message (model text with markup is not repeated)."""
    return repr(name) if len(name) <= 64 and "<" not in name else "(a name with markup)"


def parse_params(
    body: str, schema_of: Callable[[str], dict[str, Any] | None]
) -> dict[str, Any] | str:
    """A call body's arguments, or why the body breaks the grammar.

    `schema_of(key)` gives a parameter's JSON schema (or None) for typing."""
    args: dict[str, Any] = {}
    last: str | None = None
    pos, n = 0, len(body)
    while True:
        pos = skip_space(body, pos)
        if pos == n:
            return args
        if not body.startswith(PARAM_OPEN, pos):
            rest = body[pos:]
            if PARAM_OPEN.startswith(rest):
                return "a parameter cut off in its tag"
            close, opening = rest.find(PARAM_CLOSE), rest.find(PARAM_OPEN)
            if last is not None and close >= 0 and (opening < 0 or close < opening):
                return f"a reserved parameter close tag inside the value of {shown(last)}"
            return "stray text in the call body"
        key_at = pos + len(PARAM_OPEN)
        key_end = body.find('">', key_at)
        if key_end < 0:
            return "a parameter cut off in its tag"
        key = body[key_at:key_end]
        value_end = body.find(PARAM_CLOSE, key_end + 2)
        if value_end < 0:
            return f"a partial parameter {shown(key)}"
        args[key] = typed_value(body[key_end + 2 : value_end], schema_of(key))
        last = key
        pos = value_end + len(PARAM_CLOSE)


class BeamParser(HarmonyParser):
    name = "beam"
    wants_eos_text = True

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._faults: list[str] = []  # grammar violations seen, in order
        self._held: list[Piece] = []  # calls closed after a violation

    def _fault(self, why: str) -> None:
        self._faults.append(why)

    # -- hooks --------------------------------------------------------------------

    def segment(self, header: str) -> tuple[bool, str | None]:
        channel, name = header_parts(header)
        if name is None:
            if not _TEXT_HEADER.fullmatch(header):
                self._fault("a segment header that is neither analysis nor final")
            return channel == "analysis", None
        match = _CALL_HEADER.fullmatch(header)
        if match is None:
            self._fault("a call header that does not follow the grammar")
        else:
            name = match.group(1)
        if name not in self.tools:
            bare = name.removeprefix("functions.")
            if bare in self.tools:
                name = bare
        return channel == "analysis", name

    def call(self, name: str, body: str, closed: bool) -> ToolCall | None:
        if not closed and not body.strip():
            return None  # a header with nothing after it: no evidence of a call
        args = parse_params(body, lambda key: self.tools.param_schema(name, key))
        if isinstance(args, str):
            self._fault(f"the call to {shown(name)} has {args}")
            return None
        return ToolCall(name, dumps_args(args))

    def malformed(self, raw: str, why: str) -> list[Piece]:
        """Broken markup is dropped (no marker may reach the client); plain text stays."""
        self._fault(why)
        return [Content(raw)] if raw and "<|" not in raw and "<rfl:" not in raw else []

    def stray(self, text: str) -> list[Piece]:
        self._fault("text outside any segment")
        return [Content(text)]

    def stray_marker(self, marker: str) -> None:
        if marker != RETURN:  # `<|return|>` between segments is the EOS (or ignore_eos framing)
            self._fault(f"a stray {_WORDS[marker]} marker outside any segment")

    def closed(self, marker: str | None) -> None:
        if marker is None:
            self._fault("a segment that never ended")
        elif self._reasoning and marker != END:
            self._fault(f"analysis ended by the {_WORDS[marker]} marker")
        elif not self._reasoning and marker == CALL:
            self._fault("final ended by the call marker")

    def emit(self, call: ToolCall) -> list[Piece]:
        if not self.tools.calls:  # nothing may be called: the arguments are the segment's text
            return [self._text(call.arguments)]
        if call.name not in self.tools:
            self._fault(f"a call to the undeclared tool {shown(call.name)}")
        if self._faults:
            self._held.append(call)
            return []
        return [call]

    # -- the two endings ------------------------------------------------------

    def finish(self) -> list[Piece]:
        out = super().finish()
        out.extend(self._held)
        self._held = []
        return out

    def finish_at_eos(self) -> list[Piece]:
        """Model EOS under the grammar: the turn is complete or the request fails."""
        out = self._drain()
        if self._mode == BODY:
            call = self.call(self._recipient, self._buf, closed=True)
            if call is not None:
                out.extend(self.emit(call))
        elif self._mode == HEAD:
            self._fault("model EOS inside a segment header")
        elif self._mode == TEXT:
            if self._reasoning:
                self._fault("model EOS inside analysis")
            elif self._buf:
                out.append(Content(self._buf))
        elif self._buf:
            self._fault("text outside any segment")
        self._reset()
        if self._faults:
            why = self._faults[0]
            raise ParseError(f"beam output breaks the turn grammar at model EOS: {why}", why)
        return out
