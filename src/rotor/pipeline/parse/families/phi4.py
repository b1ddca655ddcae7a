"""phi4 — Phi-4-mini: `functools[{"name": f, "arguments": {...}}, ...]`, one
JSON list for all calls. `functools` is plain text, not a special token, and
has no closing marker: the list ends the section, and text after it is
content. `functools` not followed by `[` (`functools.partial`) is content."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall, Tools
from rotor.pipeline.parse.jsonutil import JsonValueEnd, calls_from_json
from rotor.pipeline.parse.marker import MarkerToolParser


class Phi4Parser(MarkerToolParser):
    name = "phi4"
    start_markers = ("functools",)

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._value_end = JsonValueEnd()

    def section_end(self, buf: str, scan_from: int) -> tuple[int, int] | None:
        # Anything but a JSON value right after `functools` ends the section at
        # once, empty: `parse_section` rejects it and the text stays content.
        return self._value_end.find(buf)

    def parse_section(self, body: str) -> list[ToolCall] | None:
        if not body.strip().startswith("["):
            return None
        return calls_from_json(body)
