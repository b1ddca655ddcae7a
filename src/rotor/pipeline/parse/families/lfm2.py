"""lfm2 — LiquidAI LFM2 / LFM2.5: a Python list of calls between two special
tokens, `<|tool_call_start|>[f(a=1, b="x"), g()]<|tool_call_end|>`; text before
and after is content. The list is read as pythonic's is: Python literals via
`ast`, never evaluated.

Asked for JSON, the model writes JSON calls between the same markers, a list
of `{"name": …, "arguments": {…}}` objects or one such object; a body that
opens with `{` (or `[` then `{`) is read that way (as SGLang's parser does)."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall, skip_space
from rotor.pipeline.parse.families.pythonic import call_list
from rotor.pipeline.parse.jsonutil import calls_from_json
from rotor.pipeline.parse.marker import MarkerToolParser


class Lfm2Parser(MarkerToolParser):
    name = "lfm2"
    # Both markers are special tokens of the LFM2 tokenizer.
    needs_special_tokens = True
    start_markers = ("<|tool_call_start|>",)
    end_markers = ("<|tool_call_end|>",)

    def parse_section(self, body: str) -> list[ToolCall] | None:
        i = skip_space(body)
        if body.startswith("[", i):
            i = skip_space(body, i + 1)
        if body.startswith("{", i):
            return calls_from_json(body)
        return call_list(body)
