"""llama3_json — Llama 3.1–3.3 (and Llama 4 JSON): the output is
`{"name": f, "parameters": {...}}`, optionally after `<|python_tag|>`; parallel
calls are separated by `;` (`{...}; {...}`).

There is no start marker of its own: a `{` at the head of the output is held
until the object is known to be a call or not (`{"a": 1}` is content); a `{`
in the middle of prose is content. `<|python_tag|>` is a special token and
opens a call anywhere. Each call is sent as soon as its object closes."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall, Tools, skip_space
from rotor.pipeline.parse.families._leading import LeadingParser
from rotor.pipeline.parse.jsonutil import JsonValueEnd, call_from_obj
from rotor.pipeline.parse.jsonutil import loads as json_loads


class Llama3JsonParser(LeadingParser):
    name = "llama3_json"
    # `<|python_tag|>` is a special token of the Llama 3 tokenizer.
    needs_special_tokens = True
    lead = "{"
    marker = "<|python_tag|>"
    separator = ";"

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._value_end = JsonValueEnd()

    def section_end(self, body: str, final: bool) -> tuple[int, int] | None:
        i = skip_space(body)
        if i == len(body):
            return None
        # A call object's first key is a string: `{ x` or `{1` is prose at once.
        k = skip_space(body, i + 1)
        if body[i] != "{" or (k < len(body) and body[k] not in '"}'):
            return 0, 0
        return None if k == len(body) else self._value_end.find(body)

    def parse_section(self, body: str) -> list[ToolCall] | None:
        try:
            call = call_from_obj(json_loads(body))
        except ValueError:
            return None
        return [call] if call else None
