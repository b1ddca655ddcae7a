"""glm45 — GLM 4.5 / 4.6 / 4.7: one `<tool_call>` per call, the name first,
then key/value pairs:

    <tool_call>f
    <arg_key>a</arg_key>
    <arg_value>1</arg_value>
    </tool_call>

GLM 4.7's template drops the newlines (`<tool_call>f<arg_key>a</arg_key>…`);
both read the same here. A call without arguments is just `<tool_call>f</tool_call>`.
The template writes strings raw and everything else as JSON, so a value is
kept verbatim unless the tool's schema gives it a type.
"""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall, plain_name, skip_space
from rotor.pipeline.parse.families._xml import take, typed_arguments
from rotor.pipeline.parse.marker import MarkerToolParser

_KEY, _KEY_END = "<arg_key>", "</arg_key>"
_VALUE, _VALUE_END = "<arg_value>", "</arg_value>"


class Glm45Parser(MarkerToolParser):
    name = "glm45"
    start_markers = ("<tool_call>",)
    end_markers = ("</tool_call>",)

    def parse_section(self, body: str) -> list[ToolCall] | None:
        cut = body.find(_KEY)
        name = plain_name(body if cut < 0 else body[:cut])
        if name is None:
            return None
        pairs: list[tuple[str, str]] = []
        i = len(body) if cut < 0 else cut
        while i < len(body):
            key = take(body, i, _KEY, _KEY_END)
            if key is None:
                return None
            value = take(body, skip_space(body, key[1]), _VALUE, _VALUE_END)
            if value is None:
                return None
            key_name = plain_name(key[0])
            if key_name is None:
                return None
            pairs.append((key_name, value[0]))
            i = skip_space(body, value[1])
        return [ToolCall(name=name, arguments=typed_arguments(self.tools, name, pairs))]

    def unterminated(self, body: str) -> list[ToolCall] | None:
        """Cut off before `</tool_call>`: only a body that ends right after a
        closed value is a call; a bare name may still have been growing."""
        if not body.rstrip().endswith(_VALUE_END):
            return None
        return self.parse_section(body)
