"""deepseek_v31 — DeepSeek V3.1: one calls section of call blocks, each
`<｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>` (no type, no
fence, nothing between blocks in the official template)."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall, plain_name
from rotor.pipeline.parse.families._json_section import BlockSectionParser
from rotor.pipeline.parse.jsonutil import args_object

SEP = "<｜tool▁sep｜>"


class DeepSeekV31Parser(BlockSectionParser):
    name = "deepseek_v31"
    needs_special_tokens = True
    start_markers = ("<｜tool▁calls▁begin｜>",)
    end_markers = ("<｜tool▁calls▁end｜>",)
    call_begin = "<｜tool▁call▁begin｜>"
    call_end = "<｜tool▁call▁end｜>"

    def parse_call(self, block: str) -> ToolCall | None:
        head, sep, payload = block.partition(SEP)
        if not sep:
            return None
        name = plain_name(head)
        args = args_object(payload)
        if name is None or args is None:
            return None
        return ToolCall(name=name, arguments=args)
