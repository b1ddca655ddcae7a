"""hermes — Hermes 2/3, Qwen2.5, Qwen3: `<tool_call>{"name": f, "arguments": {...}}</tool_call>`,
repeated once per call."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall
from rotor.pipeline.parse.jsonutil import calls_from_json
from rotor.pipeline.parse.marker import MarkerToolParser


class HermesParser(MarkerToolParser):
    name = "hermes"
    start_markers = ("<tool_call>",)
    end_marker = "</tool_call>"

    def parse_section(self, body: str) -> list[ToolCall] | None:
        calls = calls_from_json(body)
        return calls if calls and len(calls) == 1 else None
