"""qwen3_coder — Qwen3-Coder, Nemotron-Nano:

    <tool_call>
    <function=f>
    <parameter=a>
    1
    </parameter>
    </function>
    </tool_call>

The template puts each value on its own lines, so one newline after the
parameter tag and one before its end belong to the markup, not the value.
Values are text, typed by the tool's schema as Qwen's reference converter
types them: by the prefix of the type name (`int`, `uint64`, `double`, `bool`,
`dict`, `list`, … as well as the JSON Schema names). As the model's reference parser
does, a parameter the model forgot to close ends at the next `<parameter=` or
at `</function>`; the function itself must be closed.
"""

from __future__ import annotations

from typing import ClassVar

from rotor.pipeline.parse.base import ToolCall, plain_name, skip_space
from rotor.pipeline.parse.families._xml import element_calls, tag_head
from rotor.pipeline.parse.jsonutil import loose_typed_value
from rotor.pipeline.parse.marker import MarkerToolParser

_FUNCTION = "<function="
_FUNCTION_END = "</function>"
_PARAM = "<parameter="
_PARAM_END = "</parameter>"


class Qwen3CoderParser(MarkerToolParser):
    name = "qwen3_coder"
    # declared again: Seed-OSS, its subclass, has markers of its own
    start_markers: ClassVar[tuple[str, ...]] = ("<tool_call>",)
    end_markers = ("</tool_call>",)
    # Inside an unclosed think block, only the call's own structure ends it.
    call_starts: ClassVar[tuple[str, ...] | None] = (
        "<tool_call>\n<function=",
        "<tool_call><function=",
    )

    def parse_section(self, body: str) -> list[ToolCall] | None:
        return element_calls(
            self.tools, body, _FUNCTION, _FUNCTION_END, plain_name, parameters, loose_typed_value
        )


def parameters(inner: str) -> list[tuple[str, str]] | None:
    """The (name, raw value) pairs of one function body; None when it holds
    anything but parameters."""
    pairs: list[tuple[str, str]] = []
    i = skip_space(inner)
    while i < len(inner):
        head = tag_head(inner, i, _PARAM)
        if head is None:
            return None
        name = plain_name(head[0])
        if name is None:
            return None
        start = head[1]
        close = inner.find(_PARAM_END, start)
        nxt = inner.find(_PARAM, start)
        if close >= 0 and (nxt < 0 or close < nxt):
            value, i = inner[start:close], close + len(_PARAM_END)
        elif nxt >= 0:
            value, i = inner[start:nxt], nxt
        else:
            value, i = inner[start:], len(inner)
        pairs.append((name, _unwrap(value)))
        i = skip_space(inner, i)
    return pairs


def _unwrap(value: str) -> str:
    """Drop the one newline on each side that the template wraps a value in."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value
