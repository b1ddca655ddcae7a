"""deepseek_v3 — DeepSeek V3 / R1: one calls section of call blocks, each
`<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\\n```json\\n{...}\\n```<｜tool▁call▁end｜>`;
several blocks in one section are parallel calls (the official template puts a
newline between them)."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall, plain_name
from rotor.pipeline.parse.families._json_section import BlockSectionParser
from rotor.pipeline.parse.jsonutil import args_object

SEP = "<｜tool▁sep｜>"
FENCE = "```"


class DeepSeekV3Parser(BlockSectionParser):
    name = "deepseek_v3"
    needs_special_tokens = True
    start_markers = ("<｜tool▁calls▁begin｜>",)
    end_markers = ("<｜tool▁calls▁end｜>",)
    call_begin = "<｜tool▁call▁begin｜>"
    call_end = "<｜tool▁call▁end｜>"

    def parse_call(self, block: str) -> ToolCall | None:
        """`type<sep>name` then the arguments in a ```json fence. The type is
        always `function` and is not checked; a missing fence is tolerated, an
        opened one must be closed."""
        _type, sep, rest = block.partition(SEP)
        if not sep:
            return None
        fence = rest.find(FENCE)
        if fence >= 0:
            head, payload = rest[:fence], rest[fence + len(FENCE) :].rstrip()
            if not payload.endswith(FENCE):
                return None
            payload = payload[: -len(FENCE)].removeprefix("json")
        else:
            head, _, payload = rest.partition("\n")
        name = plain_name(head)
        args = args_object(payload)
        if name is None or args is None:
            return None
        return ToolCall(name=name, arguments=args)
