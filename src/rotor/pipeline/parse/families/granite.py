"""granite — Granite 3.x: `<|tool_call|>[{"name": f, "arguments": {...}}, ...]`
(Granite 3.1+ may write the start as the plain string `<tool_call>`). There is
no end marker: the JSON list ends the section, and text after it is content.
A start marker not followed by `[` (or `{`, a single call) is content."""

from __future__ import annotations

from rotor.pipeline.parse.families._json_section import JsonValueSectionParser


class GraniteParser(JsonValueSectionParser):
    name = "granite"
    # `<|tool_call|>` is a special token of the Granite 3.x tokenizer.
    needs_special_tokens = True
    start_markers = ("<|tool_call|>", "<tool_call>")
