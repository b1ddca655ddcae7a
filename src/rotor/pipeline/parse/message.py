"""One choice's parse stage: reasoning split, then tool calls, then the rules
every family shares (whitespace next to calls, parallel_tool_calls, call ids)."""

from __future__ import annotations

import secrets

from rotor.pipeline.parse.base import (
    Content,
    Piece,
    ReasoningParser,
    ToolCall,
    ToolParser,
)


def new_call_id() -> str:
    """`call_` + 24 alphanumerics, as OpenAI spells tool call ids."""
    return "call_" + secrets.token_hex(12)


class MessageParser:
    __slots__ = ("_reasoning", "_tools", "_parallel", "_held_ws", "_segment_has_text", "_calls")

    def __init__(
        self,
        reasoning: ReasoningParser | None = None,
        tools: ToolParser | None = None,
        parallel_tool_calls: bool = True,
    ) -> None:
        self._reasoning = reasoning
        self._tools = tools
        if reasoning is not None and tools is not None:
            reasoning.exit_at(tools.reasoning_exits())
        self._parallel = parallel_tool_calls
        # Trailing whitespace of content is held until we know what follows: a
        # whitespace-only segment next to a call is dropped, any other kept.
        self._held_ws = ""
        self._segment_has_text = False
        self._calls = 0

    @property
    def calls(self) -> int:
        """The tool calls it has handed out (what makes finish_reason "tool_calls")."""
        return self._calls

    def feed(self, text: str) -> list[Piece]:
        if self._reasoning is None:
            if self._tools is None:
                return [Content(text)] if text else []
            return self._shape(self._tools.feed(text))
        pieces = self._reasoning.feed(text)
        return self._route(pieces)

    def finish(self, strict: bool = False, eos_text: str | None = None) -> list[Piece]:
        """End of the choice. `strict` (with the retained `eos_text`) only under
        confirmed model EOS with a turn grammar installed; may raise ParseError."""
        out: list[Piece] = []
        if self._reasoning is not None:
            out.extend(self._route(self._reasoning.finish()))
        if self._tools is not None:
            if strict:
                if eos_text:
                    out.extend(self._shape(self._tools.feed(eos_text)))
                out.extend(self._shape(self._tools.finish_at_eos()))
            else:
                out.extend(self._shape(self._tools.finish()))
            if self._held_ws and (self._segment_has_text or not self._calls):
                out.append(Content(self._held_ws))
            self._held_ws = ""
        return out

    def _route(self, pieces: list[Piece]) -> list[Piece]:
        """Reasoning goes out as is; content goes on to the tool parser."""
        if self._tools is None:
            return pieces
        out: list[Piece] = []
        for piece in pieces:
            if isinstance(piece, Content):
                out.extend(self._shape(self._tools.feed(piece.text)))
            else:
                out.append(piece)
        return out

    def _shape(self, pieces: list[Piece]) -> list[Piece]:
        out: list[Piece] = []
        for piece in pieces:
            if isinstance(piece, Content):
                text = self._held_ws + piece.text
                stripped = text.rstrip()
                self._held_ws = text[len(stripped) :]
                if stripped:
                    self._segment_has_text = True
                    out.append(Content(stripped))
            elif isinstance(piece, ToolCall):
                if self._segment_has_text and self._held_ws:
                    out.append(Content(self._held_ws))
                self._held_ws = ""
                self._segment_has_text = False
                if self._parallel or self._calls == 0:
                    self._calls += 1
                    if piece.id is None:
                        piece.id = new_call_id()
                    out.append(piece)
            else:
                out.append(piece)
        return out
