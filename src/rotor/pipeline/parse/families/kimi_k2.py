"""kimi_k2 — Kimi K2 / K2.5: one section of call blocks,
`<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>`.

The family carries its own call id: the whole `functions.f:0` string is what
Kimi's API returns and what its template expects back, so it is kept as the
call's id. Some checkpoints spell the section markers in the singular
(`<|tool_call_section_begin|>`); both spellings open and close a section.

Kimi-K2.5 does not always write `functions.NAME:N`: it writes bare counters
(`0`), `call00003`, `functionsexec5`, `functions.NAME` without the index. Such
a block's name is read from the id when it is `functions.NAME` or
`functionsNAME<digits>` with NAME a declared tool; otherwise it is inferred
when exactly one declared tool's schema fits the argument keys (as vLLM and
SGLang do). Any other id (`functions.get_weather.0`) names nothing: vLLM and
SGLang skip such a block. A block that still has no name, or whose arguments
are not a JSON object, is released as content in its place (the peers drop
it; here nothing the model wrote is lost); the section's other calls are
kept, and so are the complete calls of a section cut off mid-way.
"""

from __future__ import annotations

from typing import Any

from rotor.pipeline.parse.base import ToolCall, Tools, plain_name
from rotor.pipeline.parse.families._json_section import BlockSectionParser
from rotor.pipeline.parse.jsonutil import args_object
from rotor.pipeline.parse.jsonutil import loads as json_loads

ARGS = "<|tool_call_argument_begin|>"
PREFIX = "functions."


class KimiK2Parser(BlockSectionParser):
    name = "kimi_k2"
    needs_special_tokens = True
    start_markers = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
    end_markers = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
    call_begin = "<|tool_call_begin|>"
    call_end = "<|tool_call_end|>"
    salvage = True

    def parse_call(self, block: str) -> ToolCall | None:
        """`functions.f:0<args>{...}` → call f with id `functions.f:0`; the
        `functions.` prefix is optional. Any other id: see the module doc."""
        head, sep, payload = block.partition(ARGS)
        call_id = plain_name(head) if sep else None
        args = args_object(payload) if sep else None
        if call_id is None or args is None:
            return None
        name = _name_in_id(call_id, self.tools) or _fitting_tool(self.tools, json_loads(args))
        if name is None:
            return None
        return ToolCall(name=name, arguments=args, id=call_id)


def _name_in_id(call_id: str, tools: Tools) -> str | None:
    """`functions.NAME:N` or `NAME:N` → NAME; `functions.NAME` and
    `functionsNAME<digits>` → NAME when NAME is declared; None for anything
    else (`0`, `call00003`, `functions.get_weather.0`: peers skip such ids)."""
    rest = call_id.removeprefix(PREFIX)
    name, colon, index = rest.rpartition(":")
    if colon and name and index.isdigit():
        return name
    if rest != call_id:
        return rest if rest in tools else None
    if call_id.startswith("functions"):
        squashed = call_id.removeprefix("functions").rstrip("0123456789")
        if squashed in tools:
            return squashed
    return None


def _fitting_tool(tools: Tools, args: dict[str, Any]) -> str | None:
    """The one declared tool whose schema admits exactly these argument keys
    (every key a property, every required property present); None when no
    tool or several fit."""
    keys = set(args)
    fits = []
    for name, schema in tools.schemas.items():
        props = schema.get("properties")
        props = set(props) if isinstance(props, dict) else set()
        required = schema.get("required")
        required = (
            {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
        )
        if keys <= props and required <= keys:
            fits.append(name)
    return fits[0] if len(fits) == 1 else None
