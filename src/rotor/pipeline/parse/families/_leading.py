"""The machine for families whose calls need no start marker: the output *is*
a call when it begins (after whitespace) with the family's lead character —
`{` for llama3_json, `[` for pythonic. The same character in the middle of
prose is content. A special-token marker (`<|python_tag|>`,
`<|python_start|>`) may open a section anywhere.

Why not MarkerToolParser: a lead character is not a marker. It only counts at
the head of the output (or, for families that chain calls, right after a
call), and until the family can tell whether it starts a call it must be held
back, while prose has to stream at once.

The family says where a section's body ends (`section_end`, which may look at
the first characters to say early that this is no call) and what calls the
body holds (`parse_section`, None when malformed: released as content, the
opening marker or separator included).
"""

from __future__ import annotations

from typing import ClassVar

from rotor.pipeline.parse.base import (
    Content,
    Piece,
    ToolCall,
    ToolParser,
    Tools,
    partial_marker_len,
    skip_space,
)

_HEAD, _PROSE, _SECTION = 0, 1, 2


class LeadingParser(ToolParser):
    lead: ClassVar[str] = ""
    # A special token that opens a section anywhere; "" for none.
    marker: ClassVar[str] = ""
    # None: after a call, the rest is prose (unless `marker` opens again).
    # A string: another call may follow at once, optionally after this separator.
    separator: ClassVar[str | None] = None

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._state = _HEAD
        self._buf = ""
        self._opener = ""  # what opened the current section: "", the marker or a separator
        self._after_call = False
        # One step per state (_HEAD, _PROSE, _SECTION); a step says whether it moved on.
        self._steps = (self._head, self._prose, self._section)

    def reasoning_exits(self) -> tuple[str, ...]:
        """Only the marker starts a call anywhere; a lead character does not."""
        return (self.marker,) if self.marker else ()

    # -- what a family defines -------------------------------------------------

    def section_end(self, body: str, final: bool) -> tuple[int, int] | None:
        """(end of the call text, end of the section) in `body`; None while it
        is still open. (0, 0): this is no call, only the opener is released and
        the body goes on as prose. `final`: the stream has ended, decide now."""
        raise NotImplementedError

    def parse_section(self, body: str) -> list[ToolCall] | None:
        """The calls in a section's call text; None (or none) when malformed."""
        raise NotImplementedError

    # -- the machine ------------------------------------------------------------

    def feed(self, text: str) -> list[Piece]:
        if (
            self._state == _PROSE
            and not self._buf
            and (not self.marker or self.marker[0] not in text)
        ):
            return [Content(text)] if text else []
        self._buf += text
        return self._drain(final=False)

    def finish(self) -> list[Piece]:
        out = self._drain(final=True)
        self._buf, self._opener, self._state = "", "", _PROSE
        return out

    def _drain(self, final: bool) -> list[Piece]:
        out: list[Piece] = []
        steps = self._steps
        while steps[self._state](out, final):
            pass
        return out

    def _head(self, out: list[Piece], final: bool) -> bool:
        """At the head of the output (or right after a chaining call): does a
        call start here? Whitespace and a separator are held until known."""
        buf = self._buf
        i = j = skip_space(buf)
        sep = self.separator if self._after_call else None
        if sep and buf.startswith(sep, i):
            j = skip_space(buf, i + len(sep))
        elif sep and sep.startswith(buf[i:]) and not final:
            return False
        if j == len(buf) and not final:
            return False
        if buf.startswith(self.lead, j):
            if i:
                out.append(Content(buf[:i]))
            self._opener, self._buf, self._state = buf[i:j], buf[j:], _SECTION
        else:
            self._state = _PROSE
        self._after_call = False
        return True

    def _prose(self, out: list[Piece], final: bool) -> bool:
        buf = self._buf
        keep = 0
        if self.marker:
            k = buf.find(self.marker)
            if k >= 0:
                if k:
                    out.append(Content(buf[:k]))
                self._opener, self._buf = self.marker, buf[k + len(self.marker) :]
                self._state = _SECTION
                return True
            if not final:
                keep = partial_marker_len(buf, (self.marker,))
        if len(buf) > keep:
            out.append(Content(buf[: len(buf) - keep]))
            self._buf = buf[len(buf) - keep :]
        return False

    def _section(self, out: list[Piece], final: bool) -> bool:
        body = self._buf
        found = self.section_end(body, final)
        if found is None:
            if not final:
                return False
            found = (len(body), len(body))  # never complete: released as content
        call_end, end = found
        calls = self.parse_section(body[:call_end]) if end else None
        if calls:
            out.extend(calls)
            self._after_call = True
            self._state = _HEAD if self.separator is not None else _PROSE
        else:
            if self._opener or end:
                out.append(Content(self._opener + body[:end]))
            self._state = _PROSE
        self._opener, self._buf = "", body[end:]
        return True
