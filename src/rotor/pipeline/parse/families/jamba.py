"""jamba — AI21 Jamba 1.5+: `<tool_calls>[{"name": f, "arguments": {...}}, ...]</tool_calls>`;
the list holds the parallel calls (a bare object is taken as a list of one)."""

from __future__ import annotations

from rotor.pipeline.parse.families._json_section import JsonCallsParser


class JambaParser(JsonCallsParser):
    name = "jamba"
    # Both markers are single tokens of Jamba's tokenizer.
    needs_special_tokens = True
    start_markers = ("<tool_calls>",)
    end_markers = ("</tool_calls>",)
