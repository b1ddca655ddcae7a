"""Internal events → Anthropic stream events (`MessageStream`), the collected
choice → the non-streaming message (`message_body`), and the ping a quiet
stream sends (`FRAMING`'s keepalive).

Tool-use ids: the pipeline's `call_<24>` ids leave as `toolu_<24>` (the same
24 characters).
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from rotor.api.errors import APIError, anthropic_error_type
from rotor.api.sse import HOLE, NamedFraming, named_event, template
from rotor.frontend import StartedResponse
from rotor.pipeline.collected import Collected
from rotor.pipeline.events import ChoiceEvent, Usage
from rotor.pipeline.parse.base import Content, Reasoning, ToolCall

# Seconds of silence after which a streaming response sends a `ping`.
PING_INTERVAL_S = float(os.environ.get("ROTOR_ANTHROPIC_PING_S", "10"))

PING: dict[str, Any] = {"type": "ping"}
FRAMING = NamedFraming(keepalive=(PING_INTERVAL_S, named_event(PING)))


# The block kind a piece's text goes to.
_DELTA_KINDS: dict[type, str] = {Content: "text", Reasoning: "thinking"}


def tool_use_id(call_id: str) -> str:
    """`call_X` → `toolu_X`; any other id (a family's own) is kept."""
    if call_id.startswith("call_"):
        return "toolu_" + call_id[5:]
    return call_id


class MessageStream:
    """Shapes one choice's events into Anthropic stream events: blocks in
    order, each started, filled and stopped. Pure: no I/O."""

    def __init__(self, resp: StartedResponse, rid: str) -> None:
        self._head = message_head(resp, rid)
        self._usage = resp.usage
        self._input: dict[str, int] = {}  # the input side of usage, fixed at message_start
        self._index = -1  # the latest block's index
        self._open: str | None = None  # "text" or "thinking" while such a block is open
        self._calls = 0
        self._finish: str | None = None
        self._stop: Any = None
        # a block's delta event's bytes before and after its text, per (index, kind)
        self._templates: dict[tuple[int, str], tuple[bytes, ...] | None] = {}

    def start(self) -> list[dict[str, Any]]:
        # The response starts after its first engine output, which carries the
        # prompt's cache hits: message_start and message_delta report the same
        # input counts.
        self._input = input_usage(self._usage)
        message = {
            **self._head,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**self._input, "output_tokens": 0},
        }
        return [{"type": "message_start", "message": message}, PING]

    def event(self, event: ChoiceEvent) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for piece in event.pieces:
            if type(piece) is Content:
                out += self._delta("text", piece.text)
            elif type(piece) is Reasoning:
                out += self._delta("thinking", piece.text)
            elif type(piece) is ToolCall:
                out += self._tool_use(piece)
        finished = event.finished
        if finished is not None:
            self._finish = finished.finish_reason
            self._stop = finished.stop_reason
        return out

    def frames(self, event: ChoiceEvent) -> bytes | None:
        """A lone text or thinking piece for the block already open, with no
        finish (nearly every token): its delta event from the block's template."""
        pieces = event.pieces
        if len(pieces) != 1 or event.finished is not None:
            return None
        piece = pieces[0]
        if isinstance(piece, ToolCall):
            return None
        kind = _DELTA_KINDS.get(type(piece))
        if kind is None or kind != self._open:
            return None
        key = (self._index, kind)
        templates = self._templates
        if key in templates:
            parts = templates[key]
        else:
            framed = named_event(self._delta_event(kind, HOLE))
            parts = templates[key] = template(framed)
        if parts is None:
            return None
        return parts[0] + orjson.dumps(piece.text) + parts[1]

    def finish(self) -> list[dict[str, Any]]:
        stop_reason, stop_sequence = self._stop_reason()
        usage = {**self._input, "output_tokens": self._usage.completion_tokens}
        return self._close() + [
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                "usage": usage,
            },
            {"type": "message_stop"},
        ]

    def fail(self, error: APIError) -> list[dict[str, Any]]:
        kind = anthropic_error_type(error.status)
        return [{"type": "error", "error": {"type": kind, "message": error.message}}]

    def _stop_reason(self) -> tuple[str, str | None]:
        return stop_reason(self._finish, self._stop, bool(self._calls))

    def _delta(self, kind: str, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._open != kind:
            out += self._close()
            self._index += 1
            self._open = kind
            block = (
                {"type": "text", "text": ""}
                if kind == "text"
                else {"type": "thinking", "thinking": "", "signature": ""}
            )
            out.append(
                {"type": "content_block_start", "index": self._index, "content_block": block}
            )
        out.append(self._delta_event(kind, text))
        return out

    def _delta_event(self, kind: str, text: str) -> dict[str, Any]:
        delta = {"type": f"{kind}_delta", kind: text}
        return {"type": "content_block_delta", "index": self._index, "delta": delta}

    def _close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": self._index}]

    def _tool_use(self, call: ToolCall) -> list[dict[str, Any]]:
        out = self._close()
        self._index += 1
        self._calls += 1
        call_id = tool_use_id(call.id or "")  # the pipeline gives every call an id
        block = {"type": "tool_use", "id": call_id, "name": call.name, "input": {}}
        i = self._index
        return out + [
            {"type": "content_block_start", "index": i, "content_block": block},
            {
                "type": "content_block_delta",
                "index": i,
                "delta": {"type": "input_json_delta", "partial_json": call.arguments},
            },
            {"type": "content_block_stop", "index": i},
        ]


def message_head(resp: StartedResponse, rid: str) -> dict[str, Any]:
    return {"id": f"msg_{rid}", "type": "message", "role": "assistant", "model": resp.model}


def input_usage(usage: Usage) -> dict[str, int]:
    """The input side of usage (Anthropic's `input_tokens` excludes cache reads)."""
    cached = usage.cached_tokens or 0
    return {
        "input_tokens": usage.prompt_tokens - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def stop_reason(finish: str | None, stop: Any, called: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) from the choice's finish."""
    if finish == "length":
        return "max_tokens", None
    if isinstance(stop, str):
        return "stop_sequence", stop
    if finish == "tool_calls" or called:  # a named tool ends in "stop" in chat
        return "tool_use", None
    return "end_turn", None


def message_body(resp: StartedResponse, rid: str, choice: Collected) -> dict[str, Any]:
    """The non-streaming message: the choice's blocks in the order they came."""
    content: list[dict[str, Any]] = []
    for piece in choice.pieces():
        if type(piece) is Content:
            content.append({"type": "text", "text": piece.text})
        elif type(piece) is Reasoning:
            content.append({"type": "thinking", "thinking": piece.text, "signature": ""})
        elif type(piece) is ToolCall:
            args = piece.arguments
            content.append(
                {
                    "type": "tool_use",
                    "id": tool_use_id(piece.id or ""),
                    "name": piece.name,
                    "input": orjson.loads(args) if args else {},
                }
            )
    reason, sequence = stop_reason(
        choice.finish_reason, choice.stop_reason, bool(choice.tool_calls())
    )
    usage = resp.usage
    return {
        **message_head(resp, rid),
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": {**input_usage(usage), "output_tokens": usage.completion_tokens},
    }
