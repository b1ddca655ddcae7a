"""kimi_k2 — Kimi K2: one section of call blocks,
`<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>`.

The family carries its own call id: the whole `functions.f:0` string is what
Kimi's API returns and what its template expects back, so it is kept as the
call's id. Some checkpoints spell the section markers in the singular
(`<|tool_call_section_begin|>`); both spellings open and close a section."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall, partial_marker_len
from rotor.pipeline.parse.families._json_section import BlockSectionParser, args_object, call_name

ARGS = "<|tool_call_argument_begin|>"
PREFIX = "functions."
# The singular end marker is shorter than `end_marker`, so the machine's
# incremental scan (which keeps len(end_marker) - 1 characters) still finds it.
END_MARKERS = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")


class KimiK2Parser(BlockSectionParser):
    name = "kimi_k2"
    needs_special_tokens = True
    start_markers = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
    end_marker = END_MARKERS[0]
    call_begin = "<|tool_call_begin|>"
    call_end = "<|tool_call_end|>"

    def section_end(self, buf: str, scan_from: int) -> tuple[int, int] | None:
        best: tuple[int, int] | None = None
        for marker in END_MARKERS:
            j = buf.find(marker, scan_from)
            if j >= 0 and (best is None or j < best[0]):
                best = (j, j + len(marker))
        return best

    def unterminated(self, body: str) -> list[ToolCall] | None:
        # Either end marker may have been cut off halfway.
        cut = partial_marker_len(body, END_MARKERS)
        return super().unterminated(body[: len(body) - cut])

    def parse_call(self, block: str) -> ToolCall | None:
        """`functions.f:0<args>{...}` → call f with id `functions.f:0`; the
        `functions.` prefix is optional, the `:index` suffix is not."""
        head, sep, payload = block.partition(ARGS)
        call_id = call_name(head) if sep else None
        if call_id is None:
            return None
        name, colon, index = call_id.removeprefix(PREFIX).rpartition(":")
        args = args_object(payload)
        if not colon or not name or not index.isdigit() or args is None:
            return None
        return ToolCall(name=name, arguments=args, id=call_id)
