"""internlm — InternLM 2.5: `<|action_start|><|plugin|>\\n{"name": f, "parameters": {...}}<|action_end|>`,
one JSON object per action. `<|action_start|><|interpreter|>` (code to run, not
a function call) is not a tool section and stays content."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall
from rotor.pipeline.parse.jsonutil import calls_from_json
from rotor.pipeline.parse.marker import MarkerToolParser


class InternLMParser(MarkerToolParser):
    name = "internlm"
    needs_special_tokens = True
    start_markers = ("<|action_start|><|plugin|>",)
    end_marker = "<|action_end|>"

    def parse_section(self, body: str) -> list[ToolCall] | None:
        calls = calls_from_json(body)
        return calls if calls and len(calls) == 1 else None
