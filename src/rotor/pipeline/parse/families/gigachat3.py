"""gigachat3 — GigaChat 3 / 3.1: one call, a JSON object after a role header,
and no end marker:

    <|message_sep|>\\n\\nfunction call<|role_sep|>\\n{"name": "f", "arguments": {...}}   (GigaChat 3)
    <|function_call|>{"name": "f", "arguments": {...}}                             (GigaChat 3.1)

Text before the header is content; the message separator in front of the
header belongs to it. The object ends the section; text after it is content."""

from __future__ import annotations

from rotor.pipeline.parse.families._json_section import JsonValueSectionParser


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
    single = True
