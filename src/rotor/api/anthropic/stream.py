"""Internal events → Anthropic stream events (`MessageStream`), the fold that
builds the non-streaming message from those same events (`fold_message`), and
the pings a quiet stream sends (`with_pings`).

Tool-use ids: the pipeline's `call_<24>` ids leave as `toolu_<24>` (the same
24 characters).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from rotor.api.errors import APIError, anthropic_error_type
from rotor.frontend import Response as ChatResponse
from rotor.pipeline.events import ChoiceEvent
from rotor.pipeline.parse.base import Content, Reasoning, ToolCall

# Seconds of silence after which a streaming response sends a `ping`.
PING_INTERVAL_S = float(os.environ.get("ROTOR_ANTHROPIC_PING_S", "10"))

PING: dict[str, Any] = {"type": "ping"}


def tool_use_id(call_id: str) -> str:
    """`call_X` → `toolu_X`; any other id (a family's own) is kept."""
    if call_id.startswith("call_"):
        return "toolu_" + call_id[5:]
    return call_id


class MessageStream:
    """Shapes one choice's events into Anthropic stream events: blocks in
    order, each started, filled and stopped. Pure: no I/O."""

    def __init__(self, resp: ChatResponse, rid: str) -> None:
        self._head = {
            "id": f"msg_{rid}",
            "type": "message",
            "role": "assistant",
            "model": resp.model,
        }
        self._usage = resp.usage
        self._input: dict[str, int] = {}  # the input side of usage, fixed at message_start
        self._index = -1  # the latest block's index
        self._open: str | None = None  # "text" or "thinking" while such a block is open
        self._calls = 0
        self._finish: str | None = None
        self._stop: Any = None

    def start(self) -> list[dict[str, Any]]:
        # The response starts after its first engine output, which carries the
        # prompt's cache hits: message_start and message_delta report the same
        # input counts (Anthropic's `input_tokens` excludes cache reads).
        u = self._usage
        cached = u.cached_tokens or 0
        self._input = {
            "input_tokens": u.prompt_tokens - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
        }
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
        if self._finish == "length":
            return "max_tokens", None
        if isinstance(self._stop, str):
            return "stop_sequence", self._stop
        if self._finish == "tool_calls" or self._calls:  # a named tool ends in "stop" in chat
            return "tool_use", None
        return "end_turn", None

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
        delta = {"type": f"{kind}_delta", kind: text}
        out.append({"type": "content_block_delta", "index": self._index, "delta": delta})
        return out

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


def fold_message(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The non-streaming message: the events applied in order, as a client
    accumulates them."""
    message: dict[str, Any] = {}
    content: list[dict[str, Any]] = []
    partial: dict[int, list[str]] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = {**event["message"], "usage": dict(event["message"]["usage"])}
            message["content"] = content
        elif kind == "content_block_start":
            content.append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            i, delta = event["index"], event["delta"]
            if delta["type"] == "text_delta":
                content[i]["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                content[i]["thinking"] += delta["thinking"]
            elif delta["type"] == "input_json_delta":
                partial.setdefault(i, []).append(delta["partial_json"])
        elif kind == "content_block_stop":
            pieces = partial.pop(event["index"], None)
            if pieces is not None:
                text = "".join(pieces)
                content[event["index"]]["input"] = orjson.loads(text) if text else {}
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"].update(event["usage"])
    return message


async def with_pings(
    events: AsyncGenerator[dict[str, Any], None], interval: float
) -> AsyncGenerator[dict[str, Any], None]:
    """`events`, plus a `ping` whenever `interval` seconds pass with none.

    One pump task per stream reads `events`, so the per-event path stays a
    queue hand-off; closing this generator cancels the pump, which closes the
    pipeline (and the engine's work) at once."""
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)
    end = object()
    quiet = True  # nothing arrived since the last tick

    async def pump() -> None:
        nonlocal quiet
        try:
            async for event in events:
                quiet = False
                await queue.put(event)
        except Exception as e:  # handed to the reader, raised there
            await queue.put(e)
            return
        await queue.put(end)

    async def tick() -> None:
        nonlocal quiet
        while True:
            await asyncio.sleep(interval)
            if quiet and queue.empty():
                queue.put_nowait(PING)
            quiet = True

    tasks = [asyncio.create_task(pump()), asyncio.create_task(tick())]
    try:
        while True:
            item = await queue.get()
            if item is end:
                return
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await events.aclose()
