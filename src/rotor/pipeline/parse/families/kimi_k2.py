"""kimi_k2 — Kimi K2: one section of call blocks,
`<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>`.

The family carries its own call id: the whole `functions.f:0` string is what
Kimi's API returns and what its template expects back, so it is kept as the
call's id. Some checkpoints spell the section markers in the singular
(`<|tool_call_section_begin|>`); both spellings open and close a section."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall, plain_name
from rotor.pipeline.parse.families._json_section import BlockSectionParser
from rotor.pipeline.parse.jsonutil import args_object

ARGS = "<|tool_call_argument_begin|>"
PREFIX = "functions."


class KimiK2Parser(BlockSectionParser):
    name = "kimi_k2"
    needs_special_tokens = True
    start_markers = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
    end_markers = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
    call_begin = "<|tool_call_begin|>"
    call_end = "<|tool_call_end|>"

    def parse_call(self, block: str) -> ToolCall | None:
        """`functions.f:0<args>{...}` → call f with id `functions.f:0`; the
        `functions.` prefix is optional, the `:index` suffix is not."""
        head, sep, payload = block.partition(ARGS)
        call_id = plain_name(head) if sep else None
        if call_id is None:
            return None
        name, colon, index = call_id.removeprefix(PREFIX).rpartition(":")
        args = args_object(payload)
        if not colon or not name or not index.isdigit() or args is None:
            return None
        return ToolCall(name=name, arguments=args, id=call_id)
