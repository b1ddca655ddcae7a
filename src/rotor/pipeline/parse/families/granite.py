"""granite — Granite 3.x: `<|tool_call|>[{"name": f, "arguments": {...}}, ...]`
(Granite 3.1+ may write the start as the plain string `<tool_call>`). There is
no end marker: the JSON list ends the section, and text after it is content.
A start marker not followed by `[` (or `{`, a single call) is content."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall, Tools
from rotor.pipeline.parse.jsonutil import JsonValueEnd, calls_from_json
from rotor.pipeline.parse.marker import MarkerToolParser


class GraniteParser(MarkerToolParser):
    name = "granite"
    # `<|tool_call|>` is a special token of the Granite 3.x tokenizer.
    needs_special_tokens = True
    start_markers = ("<|tool_call|>", "<tool_call>")

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._value_end = JsonValueEnd()

    def section_end(self, buf: str, scan_from: int) -> tuple[int, int] | None:
        return self._value_end.find(buf)

    def parse_section(self, body: str) -> list[ToolCall] | None:
        return calls_from_json(body)
