"""Message pieces → terminal text: reasoning dimmed, content as is, tool calls
as `→ name(arguments)` lines. Shared by text and stdin modes so both look alike.

Colour goes around runs, not pieces: a code when a run of reasoning or answer
opens, one reset when it closes, so each token costs one write and a flush.
"""

from __future__ import annotations

from typing import TextIO

from rotor.inputs.style import PLAIN, Style
from rotor.pipeline.parse.base import Content, Piece, Reasoning, ToolCall

REASONING_LABEL = "thinking:"


class Renderer:
    """Writes one answer's pieces as they come and flushes each, so it streams.

    `reasoning_out` lets stdin mode keep reasoning off stdout; `style` is the
    look (PLAIN, the default, writes the bare text)."""

    def __init__(
        self, out: TextIO, reasoning_out: TextIO | None = None, style: Style = PLAIN
    ) -> None:
        self.out = out
        self.reasoning_out = reasoning_out if reasoning_out is not None else out
        self.style = style
        self._run: type | None = None  # Content or Reasoning while a run is open
        self._line_start = {id(out): True, id(self.reasoning_out): True}

    def _write(self, stream: TextIO, text: str) -> None:
        if not text:
            return
        stream.write(text)
        stream.flush()
        self._line_start[id(stream)] = text.endswith("\n")

    def _new_line(self, stream: TextIO) -> None:
        if not self._line_start[id(stream)]:
            self._write(stream, "\n")

    def _close_run(self) -> None:
        run, self._run = self._run, None
        if run is Reasoning:
            stream = self.reasoning_out
            if self.style.reasoning:
                stream.write(self.style.reset)
            self._new_line(stream)  # the answer starts on its own line
            stream.flush()
        elif run is Content and self.style.answer:
            self.out.write(self.style.reset)
            self.out.flush()

    def _open_run(self, run: type) -> None:
        self._close_run()
        self._run = run
        style = self.style
        if run is Reasoning:
            stream = self.reasoning_out
            if style.decorate:
                self._new_line(stream)
                self._write(stream, style.paint(style.label, REASONING_LABEL) + " ")
            stream.write(style.reasoning)
        else:
            self.out.write(style.answer)

    def piece(self, piece: Piece) -> None:
        if isinstance(piece, Content):
            if self._run is not Content:
                self._open_run(Content)
            self._write(self.out, piece.text)
        elif isinstance(piece, Reasoning):
            if self._run is not Reasoning:
                self._open_run(Reasoning)
            self._write(self.reasoning_out, piece.text)
        elif isinstance(piece, ToolCall):
            self._close_run()
            self._new_line(self.out)
            self._write(self.out, self.style.paint(self.style.tool, tool_call_line(piece)) + "\n")

    def finish(self, finish_reason: str | None = None) -> None:
        """Close any open run and end the answer's last line; on a terminal, a
        finish other than `stop` is noted after the answer (`[length]`)."""
        self._close_run()
        style = self.style
        if style.decorate and finish_reason not in (None, "stop"):
            gap = "" if self._line_start[id(self.out)] else " "
            self._write(self.out, gap + style.paint(style.note, f"[{finish_reason}]"))
        self._new_line(self.out)


def tool_call_line(call: ToolCall) -> str:
    return f"→ {call.name}({call.arguments})"
