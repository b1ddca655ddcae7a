"""mistral — Mistral / Mixtral, both tokenizer generations (mistral_common):

- before v11: `[TOOL_CALLS][{"name": f, "arguments": {...}}, ...]`, one list
  for all calls (an item may carry its own `"id"`);
- v11 and later: `[TOOL_CALLS]f[ARGS]{...}`, one marker per call, and with
  call ids `[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{...}`. Tokenizers that drop
  `[ARGS]` when decoding give `[TOOL_CALLS]f{...}`, read the same way.

`[TOOL_CALLS]`, `[ARGS]` and `[CALL_ID]` are special tokens. There is no end
marker: a call ends where its JSON value closes, and text after it is content.
A call id written by the model is kept (Mistral's template expects it back)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rotor.pipeline.parse.base import ToolCall, Tools, skip_space
from rotor.pipeline.parse.families._json_section import JsonValueSectionParser
from rotor.pipeline.parse.jsonutil import all_calls, call_from_obj
from rotor.pipeline.parse.jsonutil import loads as json_loads

ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"


@dataclass(frozen=True)
class _Head:
    """How a section body opens: `name` None for the JSON-list form."""

    name: str | None
    call_id: str | None
    value_at: int  # where the JSON value (list, or the arguments) starts


class MistralParser(JsonValueSectionParser):
    name = "mistral"
    needs_special_tokens = True
    start_markers = ("[TOOL_CALLS]",)

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._value_at = -1  # where the open section's JSON value starts, once known

    def open_section(self) -> None:
        super().open_section()
        self._value_at = -1

    def section_end(self, buf: str, scan_from: int) -> tuple[int, int] | None:
        if self._value_at < 0:
            head = _head(buf)
            if head is None or isinstance(head, int):
                return None if head is None else (head, head)
            self._value_at = head.value_at
        found = self._value_end.find(buf, self._value_at)
        if found is not None:
            self._value_at = -1
        return found

    def parse_section(self, body: str) -> list[ToolCall] | None:
        head = _head(body)
        if not isinstance(head, _Head):
            return None
        try:
            value = json_loads(body[head.value_at :])
        except ValueError:
            return None
        if head.name is None:
            items = value if isinstance(value, list) else [value]
            return all_calls([_listed_call(item) for item in items])
        call = call_from_obj({"name": head.name, "arguments": value})
        if call is None:
            return None
        call.id = head.call_id
        return [call]


def _head(body: str) -> _Head | int | None:
    """The layout of a section body as far as it has arrived; None while its
    head is still arriving, an index where it stops fitting either form."""
    i = skip_space(body)
    n = len(body)
    if i == n:
        return None
    if body[i] in "[{":
        return _Head(None, None, i)
    j = _run(body, i, "_-.")
    if j == n:
        return None
    if j == i:
        return i
    name, call_id = body[i:j], None
    if body.startswith(CALL_ID, j):
        k = j + len(CALL_ID)
        j = _run(body, k, "_-")
        if j == n:
            return None
        if j == k:
            return j
        call_id = body[k:j]
    elif body[j] == "{":
        return _Head(name, None, j)
    elif CALL_ID.startswith(body[j:]):
        return None
    if body.startswith(ARGS, j):
        return _Head(name, call_id, j + len(ARGS))
    return None if ARGS.startswith(body[j:]) else j


def _run(text: str, i: int, extra: str) -> int:
    """End of the run of letters, digits and `extra` characters from `i`."""
    n = len(text)
    while i < n and (text[i].isalnum() or text[i] in extra):
        i += 1
    return i


def _listed_call(item: Any) -> ToolCall | None:
    """One item of the pre-v11 list; its `"id"`, when it has one, is kept."""
    call = call_from_obj(item)
    if call is not None:
        call_id = item.get("id")
        if isinstance(call_id, str) and call_id.strip() and call_id != "null":
            call.id = call_id.strip()
    return call
