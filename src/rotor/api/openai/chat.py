"""Internal events → `chat.completion.chunk`s (`ChatShaper`), and the fold of
those chunks into one `chat.completion` (`fold_chat`). Chunks are built from
an allow-list of fields: nothing internal (End kind, retained EOS text) can
reach a client."""

from __future__ import annotations

from typing import Any

from rotor.api.openai.base import OpenAIShaper
from rotor.api.openai.usage import chat_logprob, usage
from rotor.frontend import Response
from rotor.pipeline.decode import End
from rotor.pipeline.events import ChoiceEvent
from rotor.pipeline.parse.base import Content, Reasoning, ToolCall


class ChatShaper(OpenAIShaper):
    __slots__ = ("_reasoning_field", "_calls")

    def __init__(
        self,
        resp: Response,
        reasoning_field: str = "reasoning_content",
        include_usage: bool = False,
        continuous_usage: bool = False,
    ) -> None:
        super().__init__(resp, "chat.completion.chunk", include_usage, continuous_usage)
        self._reasoning_field = reasoning_field
        self._calls = [0] * resp.n  # tool calls sent so far, per choice

    def start(self) -> list[dict[str, Any]]:
        """The opening chunk of each choice (`role`, empty content), as OpenAI sends it."""
        return [
            self._chunk(
                {
                    "index": i,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            )
            for i in range(self._resp.n)
        ]

    def event(self, event: ChoiceEvent) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        index = event.index
        token_text = self._resp.token_text
        logprobs = None
        if token_text is not None and event.logprobs:
            logprobs = {
                "content": [
                    chat_logprob(lp, token_text, self._resp.token_bytes) for lp in event.logprobs
                ]
            }
        for piece in event.pieces:
            delta: dict[str, Any]
            if type(piece) is Content:
                delta = {"content": piece.text}
            elif type(piece) is Reasoning:
                delta = {self._reasoning_field: piece.text}
            elif type(piece) is ToolCall:
                k = self._calls[index]
                self._calls[index] = k + 1
                delta = {
                    "tool_calls": [
                        {
                            "index": k,
                            "id": piece.id,
                            "type": "function",
                            "function": {"name": piece.name, "arguments": piece.arguments},
                        }
                    ]
                }
            else:  # pragma: no cover - Piece is closed
                continue
            out.append(
                self._chunk(
                    {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}
                )
            )
            logprobs = None
        finished = event.finished
        if finished is not None and finished.end is not End.CANCELLED:
            out.append(
                self._chunk(
                    {
                        "index": index,
                        "delta": {},
                        "logprobs": logprobs,
                        "finish_reason": finished.finish_reason,
                        "stop_reason": finished.stop_reason,
                    }
                )
            )
        return out


def fold_chat(chunks: list[dict[str, Any]], resp: Response) -> dict[str, Any]:
    """The chunks folded into one `chat.completion`."""
    n = resp.n
    content: list[list[str]] = [[] for _ in range(n)]
    reasoning: dict[int, list[str]] = {}
    calls: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    logprobs: list[list[dict[str, Any]] | None] = [None] * n
    finish: list[str | None] = [None] * n
    stop_reason: list[Any] = [None] * n
    reasoning_key = "reasoning_content"
    for chunk in chunks:
        for c in chunk["choices"]:
            i = c["index"]
            for key, value in c["delta"].items():
                if key == "content":
                    content[i].append(value)
                elif key == "tool_calls":
                    for call in value:
                        calls[i].append({k: call[k] for k in ("id", "type", "function")})
                elif key != "role":
                    reasoning_key = key
                    reasoning.setdefault(i, []).append(value)
            if c.get("logprobs"):
                logprobs[i] = (logprobs[i] or []) + c["logprobs"]["content"]
            if c.get("finish_reason") is not None:
                finish[i] = c["finish_reason"]
                stop_reason[i] = c.get("stop_reason")
    choices = []
    for i in range(n):
        text = "".join(content[i])
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if (not text and calls[i]) else text,
        }
        if i in reasoning:
            message[reasoning_key] = "".join(reasoning[i])
        if calls[i]:
            message["tool_calls"] = calls[i]
        choices.append(
            {
                "index": i,
                "message": message,
                "logprobs": {"content": logprobs[i]} if logprobs[i] is not None else None,
                "finish_reason": finish[i],
                "stop_reason": stop_reason[i],
            }
        )
    u = resp.usage
    return {
        "id": resp.id,
        "object": "chat.completion",
        "created": resp.created,
        "model": resp.model,
        "choices": choices,
        "usage": usage(u.prompt_tokens, u.completion_tokens, u.cached_tokens),
    }
