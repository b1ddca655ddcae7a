"""Send one chat request through the frontend and stream its pieces.

The terminal inputs share this so that they stop at the same place: the
choice's `finish_reason`. Nothing is awaited after it, so a REPL is back at
its prompt the moment the answer is complete.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rotor.frontend import Frontend
from rotor.pipeline.collected import Collected
from rotor.pipeline.parse.base import Piece, ToolCall
from rotor.pipeline.preprocess import new_request_id
from rotor.protocol.openai import ChatCompletionRequest

OnPiece = Callable[[Piece], None]


class System(Protocol):
    """What an input runs on: a frontend, and what to start and stop around
    it (rotor.serve builds one)."""

    frontend: Frontend

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class Answer:
    """One finished choice, folded, with the numbers batch mode reports."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float | None = None  # to the first generated piece; None when there was none
    latency_s: float = 0.0

    def message(self) -> dict[str, Any]:
        """The assistant message to append to a conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["content"] = self.text or None
            msg["tool_calls"] = [
                {
                    "id": call.id or f"call_{i}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for i, call in enumerate(self.tool_calls)
            ]
        return msg


async def stream_chat(
    frontend: Frontend, request: ChatCompletionRequest, on_piece: OnPiece | None = None
) -> Answer:
    """Run `request` (choice 0) to its finish_reason, calling `on_piece` as pieces come.

    Raises what the frontend raises: RequestError / ModelNotFound before any
    output, ResponseFailed from the stream. Cancelling the caller closes the
    event stream, which stops the engine's work for this request."""
    start = time.perf_counter()
    response = await frontend.chat(frontend.model(request.model), request, new_request_id())
    answer = Answer()
    collected = Collected()
    events = response.events
    try:
        async for event in events:
            if event.index != 0:
                continue
            if event.pieces and answer.ttft_s is None:
                answer.ttft_s = time.perf_counter() - start
            collected.add(event)
            if on_piece is not None:
                for piece in event.pieces:
                    on_piece(piece)
            if event.finished is not None:
                answer.finish_reason = event.finished.finish_reason
                break
    finally:
        await events.aclose()
    answer.latency_s = time.perf_counter() - start
    answer.text = collected.text()
    answer.reasoning = collected.reasoning() or ""
    answer.tool_calls = collected.tool_calls()
    answer.prompt_tokens = response.usage.prompt_tokens
    answer.completion_tokens = response.usage.completion_tokens
    return answer
