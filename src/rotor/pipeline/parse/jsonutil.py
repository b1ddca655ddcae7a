"""JSON helpers shared by the tool-call families. Model output is data: it is
parsed (json / ast literals), never evaluated."""

from __future__ import annotations

import json
from typing import Any

from rotor.pipeline.parse.base import ToolCall, skip_space

_CLOSER = {"[": "]", "{": "}"}

# Deeper JSON than this in model output is not a tool call's arguments: it is
# refused as malformed (released as content), never parsed recursively into a
# RecursionError that would lose the output.
MAX_DEPTH = 256


def loads(text: str, **kwargs: Any) -> Any:
    """json.loads, with too deep a value a ValueError like any other malformed JSON."""
    if text.count("[") + text.count("{") > MAX_DEPTH and nesting_depth(text) > MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting outside strings, in one pass, without recursion."""
    depth = deepest = 0
    in_str = esc = False
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def dumps_args(args: Any) -> str:
    """The `arguments` string of an OpenAI tool call."""
    return json.dumps(args, ensure_ascii=False)


def json_value_end(text: str) -> int | None:
    """Index just past the JSON object/array that begins at the first
    non-space character of `text`; None while it is incomplete, when no
    object/array starts there, or when a bracket closes the wrong one."""
    finder = JsonValueEnd()
    found = finder.find(text)
    if found is None or not finder.well_formed:
        return None
    return found[1]


class JsonValueEnd:
    """Where a section that is one JSON array/object (no end marker) ends.

    It resumes where the last call stopped instead of rescanning the body, so
    a long argument costs one pass, not one pass per token. One instance per
    parser: it starts afresh after each end it reports. After an end,
    `well_formed` says whether a whole value closed there (or the body did not
    open with a bracket / closed the wrong one). `opens`: the brackets a
    value may open with."""

    __slots__ = ("_opens", "_pos", "_stack", "_in_str", "_esc", "well_formed")

    def __init__(self, opens: str = "[{") -> None:
        self._opens = opens
        self.reset()

    def reset(self) -> None:
        """Forget the section: the next `find` reads a new body from its start."""
        self._pos = 0  # next character of the body to look at
        self._stack: list[str] = []  # closers still owed; empty before the value opens
        self._in_str = False
        self._esc = False
        self.well_formed = False

    def find(self, buf: str, start: int = 0) -> tuple[int, int] | None:
        """(end of body, end of section) in `buf` once the value is complete.
        The body begins at `start` (the same for every call on one body). A
        body that does not open with one of `opens`, or closes a bracket it
        did not open, ends there: the family's parse then rejects it as malformed."""
        i, n = max(self._pos, start), len(buf)
        stack = self._stack
        if not stack:
            i = skip_space(buf, i)
            if i == n:
                self._pos = i
                return None
            if buf[i] not in self._opens:
                self.reset()
                return i, i
            stack.append(_CLOSER[buf[i]])
            i += 1
        in_str, esc = self._in_str, self._esc
        while i < n:
            c = buf[i]
            i += 1
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c in _CLOSER:
                stack.append(_CLOSER[c])
            elif c in "]}":
                matched = stack.pop() == c
                # Either the value just closed, or it closed the wrong bracket.
                if not matched or not stack:
                    self.reset()
                    self.well_formed = matched
                    return i, i
        self._pos, self._in_str, self._esc = i, in_str, esc
        return None


def args_object(text: str) -> str | None:
    """Serialised arguments from a JSON object's text; nothing at all is `{}`.
    None when the text is not one JSON object."""
    text = text.strip()
    if not text:
        return "{}"
    try:
        value = loads(text)
    except ValueError:
        return None
    return dumps_args(value) if isinstance(value, dict) else None


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
        serialised = args_object(args)
        return None if serialised is None else ToolCall(name=name, arguments=serialised)
    if not isinstance(args, dict):
        return None
    return ToolCall(name=name, arguments=dumps_args(args))


def all_calls(calls: list[ToolCall | None]) -> list[ToolCall] | None:
    """The calls when there is one at least and none is malformed (None); else None."""
    good = [call for call in calls if call is not None]
    return good if good and len(good) == len(calls) else None


def calls_from_json(text: str) -> list[ToolCall] | None:
    """A JSON object or a list of objects, each one call; None when malformed."""
    try:
        data = loads(text)
    except ValueError:
        return None
    items = data if isinstance(data, list) else [data]
    return all_calls([call_from_obj(item) for item in items])


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
    for key in ("anyOf", "oneOf"):
        subs = schema.get(key)
        for sub in subs if isinstance(subs, list) else ():
            if isinstance(sub, dict):
                found.extend(schema_types(sub))
    enum = schema.get("enum")
    for value in enum if isinstance(enum, list) else ():
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
            value = loads(candidate, parse_constant=_reject_constant)
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


# Type names as Qwen's reference converter reads them (by prefix): real tool
# schemas say `int`, `uint64`, `long`, `double`, `bool`, `dict`, `list`, …
_LOOSE_STRING = ("string", "str", "text", "varchar", "char", "enum")
_LOOSE_PREFIXES = (
    (("int", "uint", "long", "short", "unsigned"), "integer"),
    (("num", "float", "double", "decimal"), "number"),
    (("bool", "binary"), "boolean"),
    (("object", "dict", "map"), "container"),
    (("array", "arr", "list", "tuple"), "container"),
    (("null", "none"), "null"),
)


def loose_type(name: str) -> str | None:
    """A schema type name → integer, number, boolean, container, null or
    string; None for a name with no known meaning."""
    low = name.strip().lower()
    if low in _LOOSE_STRING:
        return "string"
    for prefixes, kind in _LOOSE_PREFIXES:
        if low.startswith(prefixes):
            return kind
    return None


def loose_typed_value(text: str, schema: dict[str, Any] | None) -> Any:
    """A parameter value typed as Qwen's reference converter types it: by the
    prefix of each declared type name, in order; numbers and booleans
    converted, objects and arrays JSON-decoded when they parse (either kind of
    container for either type), `null` → None. A value that fits none of its
    declared types, or has no schema, stays the text it was. As in Qwen's
    converter, `null` is None whatever type is declared."""
    types = schema_types(schema) if schema else []
    if not types:
        return text
    candidate = text.strip()
    if candidate.lower() == "null":
        return None
    for t in types:
        kind = loose_type(t)
        if kind == "string":
            return text
        if kind == "null":
            if candidate.lower() == "none":
                return None
            continue
        if kind == "boolean":
            low = candidate.lower()
            if low in ("true", "false"):
                return low == "true"
            continue
        if kind is None:
            continue
        try:
            value = loads(candidate, parse_constant=_reject_constant)
        except ValueError:
            continue
        if isinstance(value, bool):
            continue
        if kind == "integer" and isinstance(value, int):
            return value
        if kind in ("integer", "number") and isinstance(value, float):
            return int(value) if value.is_integer() else value
        if kind == "number" and isinstance(value, int):
            return value
        if kind == "container" and isinstance(value, dict | list):
            return value
    return text
