"""The streaming machine most tool-call families share.

Text outside a tool section is content, streamed at once except for a suffix
that could still become a start marker. A start marker opens a section; the
section is buffered until its end (one of its end markers, or wherever the
family says its body is complete), then the family parses the body into calls.
A body that does not parse is released as content, markers included: nothing
the model wrote is lost. A family is a subclass with its markers and
`parse_section`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rotor.pipeline.parse.base import (
    Content,
    Piece,
    ToolParser,
    Tools,
    earliest,
    partial_marker_len,
    trim_partial,
)


class MarkerToolParser(ToolParser):
    start_markers: ClassVar[tuple[str, ...]] = ()
    # Any of them ends a section; none: the family overrides `section_end`.
    end_markers: ClassVar[tuple[str, ...]] = ()

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._buf = ""
        self._open: str | None = None  # the start marker of the open section
        self._scan = 0  # where to resume looking for the section's end
        self._firsts = frozenset(m[0] for m in self.start_markers)
        # An end marker the last feed cut: this many characters are read again.
        self._end_tail = max((len(m) for m in self.end_markers), default=1) - 1

    # -- what a family defines -------------------------------------------------

    def parse_section(self, body: str) -> Sequence[Piece] | None:
        """Calls in a section body (markers excluded); None when malformed. A
        family that keeps a section's good calls around a bad one may return
        Content for the bad part, in its place."""
        raise NotImplementedError

    def section_end(self, buf: str, scan_from: int) -> tuple[int, int] | None:
        """(end of body, end of section) in `buf`, or None while still open."""
        assert self.end_markers, "a family without end_markers must override section_end"
        j, end = earliest(buf, self.end_markers, scan_from)
        if end is None:
            return None
        return j, j + len(end)

    def open_section(self) -> None:
        """A section just opened: a family that keeps scan state starts afresh."""

    def unterminated(self, body: str) -> Sequence[Piece] | None:
        """At the end of the stream, an open section: recover its calls when the
        body is complete, else None (released as content). `body` comes
        without an end marker the stream stopped halfway through."""
        return self.parse_section(body)

    # -- the machine ------------------------------------------------------------

    def feed(self, text: str) -> list[Piece]:
        if self._open is None and not self._buf:
            for c in self._firsts:
                if c in text:
                    break
            else:
                return [Content(text)] if text else []
        self._buf += text
        return self._drain()

    def _drain(self) -> list[Piece]:
        out: list[Piece] = []
        while True:
            buf = self._buf
            if self._open is None:
                idx, marker = earliest(buf, self.start_markers)
                if marker is None:
                    keep = partial_marker_len(buf, self.start_markers)
                    if len(buf) > keep:
                        out.append(Content(buf[: len(buf) - keep]))
                        self._buf = buf[len(buf) - keep :]
                    return out
                if idx:
                    out.append(Content(buf[:idx]))
                self._open = marker
                self._buf = buf[idx + len(marker) :]
                self._scan = 0
                self.open_section()
                continue
            found = self.section_end(buf, self._scan)
            if found is None:
                if self.end_markers:
                    self._scan = max(0, len(buf) - self._end_tail)
                return out
            body_end, section_end = found
            calls = self.parse_section(buf[:body_end])
            if calls is None:
                out.append(Content(self._open + buf[:section_end]))
            else:
                out.extend(calls)
            self._open = None
            self._buf = buf[section_end:]

    def finish(self) -> list[Piece]:
        out = self._drain()
        if self._open is not None:
            calls = self.unterminated(trim_partial(self._buf, self.end_markers))
            if calls:
                out.extend(calls)
            else:
                out.append(Content(self._open + self._buf))
        elif self._buf:
            out.append(Content(self._buf))
        self._buf, self._open = "", None
        return out
