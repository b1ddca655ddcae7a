"""gigachat3 — GigaChat 3 / 3.1: one call, a JSON object after a role header,
and no end marker:

    <|message_sep|>\\n\\nfunction call<|role_sep|>\\n{"name": "f", "arguments": {...}}   (GigaChat 3)
    <|function_call|>{"name": "f", "arguments": {...}}                             (GigaChat 3.1)

Text before the header is content; the message separator in front of the
header belongs to it. The object ends the section; text after it is content.
As in vLLM's and SGLang's parsers, the object is a call only when its
arguments are an object: one without them (or with a string, or null there) is
released as content, as the model wrote it."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall
from rotor.pipeline.parse.families._json_section import JsonValueSectionParser
from rotor.pipeline.parse.jsonutil import call_from_obj
from rotor.pipeline.parse.jsonutil import loads as json_loads


class GigaChat3Parser(JsonValueSectionParser):
    name = "gigachat3"
    # `<|message_sep|>`, `<|role_sep|>` and `<|function_call|>` are special tokens.
    needs_special_tokens = True
    start_markers = (
        "<|message_sep|>\n\nfunction call<|role_sep|>",
        "function call<|role_sep|>",
        "<|function_call|>",
    )
    opens = "{"

    def parse_section(self, body: str) -> list[ToolCall] | None:
        try:
            obj = json_loads(body)
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        if not isinstance(obj.get("arguments", obj.get("parameters")), dict):
            return None
        call = call_from_obj(obj)
        return [call] if call is not None else None
