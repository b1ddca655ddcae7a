"""DSML, DeepSeek's markup for calls since V3.2 (deepseek_v32, deepseek_v4):

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="f">
    <｜DSML｜parameter name="a" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="n" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

Several invokes in one section are parallel calls. `string="true"` says the
value is the raw string; `string="false"` that it is JSON (the template writes
it with json.dumps): it is decoded, and when it does not decode, typed by the
tool's schema or kept as text. An invoke may instead hold its arguments as one
JSON object, `<｜DSML｜invoke name="f">{"a": 1}</｜DSML｜invoke>` (SGLang reads
that form too); an invoke body that opens with `{` and is not one JSON object is
malformed. The families differ only in the section name.
"""

from __future__ import annotations

from typing import Any

from rotor.pipeline.parse.base import ToolCall, plain_name, skip_space
from rotor.pipeline.parse.families._xml import attr_name, elements
from rotor.pipeline.parse.jsonutil import args_object, dumps_args, typed_value
from rotor.pipeline.parse.jsonutil import loads as json_loads
from rotor.pipeline.parse.marker import MarkerToolParser

INVOKE, INVOKE_END = "<｜DSML｜invoke", "</｜DSML｜invoke>"
PARAM, PARAM_END = "<｜DSML｜parameter", "</｜DSML｜parameter>"


class DsmlParser(MarkerToolParser):
    # DSML markers are not special tokens in DeepSeek's tokenizer.
    needs_special_tokens = False

    def parse_section(self, body: str) -> list[ToolCall] | None:
        invokes = elements(body, INVOKE, INVOKE_END)
        if not invokes:
            return None
        calls: list[ToolCall] = []
        for head, inner in invokes:
            name = attr_name(head)
            if name is None:
                return None
            if inner.startswith("{", skip_space(inner)):
                args = args_object(inner)
                if args is None:
                    return None
                calls.append(ToolCall(name=name, arguments=args))
                continue
            params = elements(inner, PARAM, PARAM_END)
            if params is None:
                return None
            values: dict[str, Any] = {}
            for param_head, value in params:
                attrs = _param_attrs(param_head)
                if attrs is None:
                    return None
                key, raw = attrs
                values[key] = value if raw else self._json(name, key, value)
            calls.append(ToolCall(name=name, arguments=dumps_args(values)))
        return calls

    def _json(self, tool: str, key: str, value: str) -> Any:
        try:
            return json_loads(value)
        except ValueError:
            return typed_value(value, self.tools.param_schema(tool, key))


def _param_attrs(head: str) -> tuple[str, bool] | None:
    """` name="a" string="true"` → ("a", True); the `string` attribute may be
    missing (a raw string then). None for anything else."""
    if head[:1] not in (" ", "\t"):
        return None
    name_part, sep, string_part = head.partition(" string=")
    name = attr_name(name_part)
    if name is None:
        return None
    if not sep:
        return name, True
    flag = plain_name(string_part.strip().strip("\"'"))
    if flag not in ("true", "false"):
        return None
    return name, flag == "true"
