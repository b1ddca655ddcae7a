"""JSON helpers shared by the tool-call families. Model output is data: it is
parsed (json / ast literals), never evaluated."""

from __future__ import annotations

import json
from typing import Any

from rotor.pipeline.parse.base import ToolCall

_OPEN = {"{": "}", "[": "]"}


def dumps_args(args: Any) -> str:
    """The `arguments` string of an OpenAI tool call."""
    return json.dumps(args, ensure_ascii=False)


def json_value_end(text: str, start: int = 0) -> int | None:
    """Index just past the JSON object/array that begins at the first
    non-space character at or after `start`; None while it is incomplete or
    when no object/array starts there. Strings and escapes are respected."""
    n = len(text)
    i = start
    while i < n and text[i] in " \t\r\n":
        i += 1
    if i >= n or text[i] not in _OPEN:
        return None
    stack: list[str] = []
    in_str = False
    esc = False
    while i < n:
        c = text[i]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in _OPEN:
            stack.append(_OPEN[c])
        elif c in "}]":
            if not stack or stack.pop() != c:
                return None
            if not stack:
                return i + 1
        i += 1
    return None


def call_from_obj(obj: Any) -> ToolCall | None:
    """`{"name": f, "arguments"|"parameters": {...} or "<json>"}` → ToolCall."""
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(name=name, arguments=dumps_args(args))


def calls_from_json(text: str) -> list[ToolCall] | None:
    """A JSON object or a list of objects, each one call; None when malformed."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    items = data if isinstance(data, list) else [data]
    calls = [call_from_obj(item) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return calls  # type: ignore[return-value]


def _reject_constant(name: str) -> Any:
    """NaN / Infinity are not JSON: such a value stays a string."""
    raise ValueError(name)


def schema_types(schema: dict[str, Any]) -> list[str]:
    """The JSON types a schema admits: `type`, else those of `anyOf`/`oneOf`/`enum`."""
    types = schema.get("type")
    if isinstance(types, str):
        return [types]
    if isinstance(types, list):
        return [t for t in types if isinstance(t, str)]
    found: list[str] = []
    for sub in (schema.get("anyOf") or []) + (schema.get("oneOf") or []):
        if isinstance(sub, dict):
            found.extend(schema_types(sub))
    for value in schema.get("enum") or []:
        kind = {bool: "boolean", int: "integer", float: "number", type(None): "null"}.get(
            type(value)
        )
        if kind:
            found.append(kind)
    return found


_SCALAR_PARSERS = {"integer", "number", "boolean", "null", "object", "array"}


def typed_value(text: str, schema: dict[str, Any] | None) -> Any:
    """An XML-ish parameter value typed by its JSON schema; a string otherwise.

    A value that does not parse as the declared type stays the text it was."""
    if not schema:
        return text
    types = schema_types(schema)
    if not types:
        return text
    for t in types:
        if t not in _SCALAR_PARSERS:
            continue
        candidate = text.strip()
        if t == "boolean":
            low = candidate.lower()
            if low in ("true", "false"):
                return low == "true"
            continue
        if t == "null":
            if candidate.lower() in ("null", "none"):
                return None
            continue
        try:
            value = json.loads(candidate, parse_constant=_reject_constant)
        except ValueError:
            continue
        if t == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return value
        if t == "integer" and isinstance(value, float) and value.is_integer():
            return int(value)
        if t == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        if t == "object" and isinstance(value, dict):
            return value
        if t == "array" and isinstance(value, list):
            return value
    return text
