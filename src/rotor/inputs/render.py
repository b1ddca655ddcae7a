"""Message pieces → terminal text: reasoning dimmed, content as is, tool calls
as `→ name(arguments)` lines. Shared by text and stdin modes so both look alike.
"""

from __future__ import annotations

from typing import TextIO

from rotor.pipeline.parse.base import Content, Piece, Reasoning, ToolCall

DIM = "\x1b[2m"
RESET = "\x1b[0m"


class Renderer:
    """Writes one answer's pieces as they come and flushes each, so it streams.

    `reasoning_out` lets stdin mode keep reasoning off stdout; `dim` is for
    terminals only (a pipe gets plain text)."""

    def __init__(self, out: TextIO, reasoning_out: TextIO | None = None, dim: bool = False) -> None:
        self.out = out
        self.reasoning_out = reasoning_out if reasoning_out is not None else out
        self.dim = dim
        self._in_reasoning = False
        self._line_start = {id(out): True, id(self.reasoning_out): True}

    def _write(self, stream: TextIO, text: str) -> None:
        if not text:
            return
        stream.write(text)
        stream.flush()
        self._line_start[id(stream)] = text.endswith("\n")

    def _end_reasoning(self) -> None:
        if not self._in_reasoning:
            return
        self._in_reasoning = False
        stream = self.reasoning_out
        if self.dim:
            stream.write(RESET)
        if not self._line_start[id(stream)]:
            self._write(stream, "\n")  # the answer starts on its own line
        stream.flush()

    def piece(self, piece: Piece) -> None:
        if type(piece) is Reasoning:
            if not self._in_reasoning:
                self._in_reasoning = True
                if self.dim:
                    self.reasoning_out.write(DIM)
            self._write(self.reasoning_out, piece.text)
        elif type(piece) is Content:
            self._end_reasoning()
            self._write(self.out, piece.text)
        elif type(piece) is ToolCall:
            self._end_reasoning()
            if not self._line_start[id(self.out)]:
                self._write(self.out, "\n")
            self._write(self.out, tool_call_line(piece) + "\n")

    def finish(self) -> None:
        """Close any dim run and end the answer's last line."""
        self._end_reasoning()
        if not self._line_start[id(self.out)]:
            self._write(self.out, "\n")


def tool_call_line(call: ToolCall) -> str:
    return f"→ {call.name}({call.arguments})"
