"""minimax_m2 — MiniMax M2: one section holds one `<invoke>` per call, so
several invokes in a section are parallel calls:

    <minimax:tool_call>
    <invoke name="f">
    <parameter name="a">1</parameter>
    </invoke>
    </minimax:tool_call>

Values are text with surrounding whitespace trimmed, as MiniMax's reference
parser does; they are typed by the tool's schema (the template writes
non-strings as JSON).
"""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall
from rotor.pipeline.parse.families._xml import (
    attr_name,
    skip_ws,
    tag_head,
    trim_partial,
    typed_arguments,
)
from rotor.pipeline.parse.marker import MarkerToolParser

_INVOKE, _INVOKE_END = "<invoke", "</invoke>"
_PARAM, _PARAM_END = "<parameter", "</parameter>"


class MiniMaxM2Parser(MarkerToolParser):
    name = "minimax_m2"
    start_markers = ("<minimax:tool_call>",)
    end_marker = "</minimax:tool_call>"

    def parse_section(self, body: str) -> list[ToolCall] | None:
        calls: list[ToolCall] = []
        i = skip_ws(body, 0)
        while i < len(body):
            head = tag_head(body, i, _INVOKE)
            if head is None or head[0][:1] not in (" ", "\t"):
                return None
            name = attr_name(head[0])
            end = body.find(_INVOKE_END, head[1])
            if name is None or end < 0:
                return None
            pairs = _parameters(body[head[1] : end])
            if pairs is None:
                return None
            calls.append(ToolCall(name=name, arguments=typed_arguments(self.tools, name, pairs)))
            i = skip_ws(body, end + len(_INVOKE_END))
        return calls or None

    def unterminated(self, body: str) -> list[ToolCall] | None:
        return self.parse_section(trim_partial(body, "</minimax:tool_call>"))


def _parameters(inner: str) -> list[tuple[str, str]] | None:
    """The (name, value) pairs of one invoke; None when it holds anything else."""
    pairs: list[tuple[str, str]] = []
    i = skip_ws(inner, 0)
    while i < len(inner):
        head = tag_head(inner, i, _PARAM)
        if head is None or head[0][:1] not in (" ", "\t"):
            return None
        name = attr_name(head[0])
        end = inner.find(_PARAM_END, head[1])
        if name is None or end < 0:
            return None
        pairs.append((name, inner[head[1] : end].strip()))
        i = skip_ws(inner, end + len(_PARAM_END))
    return pairs
