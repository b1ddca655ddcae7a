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
from rotor.pipeline.parse.families._xml import attr_name, element_calls, elements
from rotor.pipeline.parse.marker import MarkerToolParser

_INVOKE, _INVOKE_END = "<invoke", "</invoke>"
_PARAM, _PARAM_END = "<parameter", "</parameter>"


class MiniMaxM2Parser(MarkerToolParser):
    name = "minimax_m2"
    start_markers = ("<minimax:tool_call>",)
    end_markers = ("</minimax:tool_call>",)

    def parse_section(self, body: str) -> list[ToolCall] | None:
        return element_calls(self.tools, body, _INVOKE, _INVOKE_END, attr_name, _parameters)


def _parameters(inner: str) -> list[tuple[str, str]] | None:
    """The (name, value) pairs of one invoke; None when it holds anything else."""
    params = elements(inner, _PARAM, _PARAM_END)
    if params is None:
        return None
    pairs: list[tuple[str, str]] = []
    for head, value in params:
        name = attr_name(head)
        if name is None:
            return None
        pairs.append((name, value.strip()))
    return pairs
