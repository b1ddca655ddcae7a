"""jamba — AI21 Jamba 1.5+: `<tool_calls>[{"name": f, "arguments": {...}}, ...]</tool_calls>`;
the list holds the parallel calls (a bare object is taken as a list of one)."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall
from rotor.pipeline.parse.jsonutil import calls_from_json
from rotor.pipeline.parse.marker import MarkerToolParser


class JambaParser(MarkerToolParser):
    name = "jamba"
    # Both markers are single tokens of Jamba's tokenizer.
    needs_special_tokens = True
    start_markers = ("<tool_calls>",)
    end_marker = "</tool_calls>"

    def parse_section(self, body: str) -> list[ToolCall] | None:
        return calls_from_json(body)
