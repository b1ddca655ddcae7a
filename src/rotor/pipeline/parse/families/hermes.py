"""hermes — Hermes 2/3, Qwen2.5, Qwen3: `<tool_call>{"name": f, "arguments": {...}}</tool_call>`,
repeated once per call."""

from __future__ import annotations

from rotor.pipeline.parse.families._json_section import JsonCallsParser


class HermesParser(JsonCallsParser):
    name = "hermes"
    start_markers = ("<tool_call>",)
    end_markers = ("</tool_call>",)
    single = True  # one call per section; parallel calls are one section each
    # Inside an unclosed think block, only the call's own structure ends it.
    call_starts = ("<tool_call>\n{", "<tool_call>{")
