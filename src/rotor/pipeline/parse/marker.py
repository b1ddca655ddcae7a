"""The streaming machine most tool-call families share.

Text outside a tool section is content, streamed at once except for a suffix
that could still become a start marker. A start marker opens a section; the
section is buffered until its end (an end marker, or wherever the family says
its body is complete), then the family parses the body into calls. A body that
does not parse is released as content, markers included: nothing the model
wrote is lost. A family is a subclass with its markers and `parse_section`.
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
)


class MarkerToolParser(ToolParser):
    start_markers: ClassVar[tuple[str, ...]] = ()
    # None: the family overrides `section_end`.
    end_marker: ClassVar[str | None] = None

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._buf = ""
        self._open: str | None = None  # the start marker of the open section
        self._scan = 0  # where to resume looking for the section's end
        self._firsts = frozenset(m[0] for m in self.start_markers)

    # -- what a family defines -------------------------------------------------

    def parse_section(self, body: str) -> list[ToolCall] | None:
        """Calls in a section body (markers excluded); None when malformed."""
        raise NotImplementedError

    def section_end(self, buf: str, scan_from: int) -> tuple[int, int] | None:
        """(end of body, end of section) in `buf`, or None while still open."""
        end = self.end_marker
        assert end is not None, "a family without end_marker must override section_end"
        j = buf.find(end, scan_from)
        if j < 0:
            return None
        return j, j + len(end)

    def unterminated(self, body: str) -> list[ToolCall] | None:
        """At the end of the stream, an open section: recover its calls when the
        body is complete, else None (released as content)."""
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
                idx, marker = self._find_start(buf)
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
                continue
            found = self.section_end(buf, self._scan)
            if found is None:
                tail = len(self.end_marker) - 1 if self.end_marker else 0
                self._scan = max(0, len(buf) - tail) if self.end_marker else 0
                return out
            body_end, section_end = found
            calls = self.parse_section(buf[:body_end])
            if calls is None:
                out.append(Content(self._open + buf[:section_end]))
            else:
                out.extend(calls)
            self._open = None
            self._buf = buf[section_end:]

    def _find_start(self, buf: str) -> tuple[int, str | None]:
        best, found = -1, None
        for marker in self.start_markers:
            i = buf.find(marker)
            if i >= 0 and (best < 0 or i < best):
                best, found = i, marker
        return best, found

    def finish(self) -> list[Piece]:
        out = self._drain()
        if self._open is not None:
            calls = self.unterminated(self._buf)
            if calls:
                out.extend(calls)
            else:
                out.append(Content(self._open + self._buf))
        elif self._buf:
            out.append(Content(self._buf))
        self._buf, self._open = "", None
        return out
