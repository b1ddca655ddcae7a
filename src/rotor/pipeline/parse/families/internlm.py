"""internlm — InternLM 2.5: `<|action_start|><|plugin|>\\n{"name": f, "parameters": {...}}<|action_end|>`,
one JSON object per action. `<|action_start|><|interpreter|>` (code to run, not
a function call) is not a tool section and stays content."""

from __future__ import annotations

from rotor.pipeline.parse.families._json_section import JsonCallsParser


class InternLMParser(JsonCallsParser):
    name = "internlm"
    needs_special_tokens = True
    start_markers = ("<|action_start|><|plugin|>",)
    end_markers = ("<|action_end|>",)
    single = True  # one call per action
