"""Internal events → `chat.completion.chunk`s (`ChatShaper`), and the
collected choices → one `chat.completion` (`chat_body`). Both are built from
an allow-list of fields: nothing internal (End kind, retained EOS text) can
reach a client."""

from __future__ import annotations

from typing import Any

from rotor.api.openai.base import OpenAIShaper
from rotor.api.openai.logprobs import listed
from rotor.api.openai.usage import chat_logprob, usage
from rotor.frontend import StartedResponse
from rotor.pipeline.collected import Collected
from rotor.pipeline.decode import End
from rotor.pipeline.events import ChoiceEvent
from rotor.pipeline.parse.base import Content, Reasoning, ToolCall


class ChatShaper(OpenAIShaper):
    __slots__ = ("_reasoning_field", "_calls", "_token_ids")

    def __init__(
        self,
        resp: StartedResponse,
        reasoning_field: str = "reasoning_content",
        include_usage: bool = False,
        continuous_usage: bool = False,
        token_ids: bool = False,
    ) -> None:
        super().__init__(resp, "chat.completion.chunk", include_usage, continuous_usage)
        self._reasoning_field = reasoning_field
        self._calls = [0] * resp.n  # tool calls sent so far, per choice
        self._token_ids = token_ids  # `return_token_ids`: the opening chunks carry the prompt's

    def start(self) -> list[dict[str, Any]]:
        """The opening chunk of each choice (`role`, empty content), as OpenAI
        sends it; with `return_token_ids` each also carries the prompt's ids
        at its root, as vLLM's do."""
        out = [
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
        if self._token_ids:
            for i, chunk in enumerate(out):
                chunk["prompt_token_ids"] = self._resp.prompt_token_ids(i)
        return out

    def frames(self, event: ChoiceEvent) -> bytes | None:
        """A lone content or reasoning piece, with no logprobs, no token ids
        and no finish (nearly every token): its chunk from the template."""
        pieces = event.pieces
        if len(pieces) != 1 or event.finished is not None or event.token_ids is not None:
            return None
        if event.logprobs and self._resp.token_text is not None:
            return None
        piece = pieces[0]
        if type(piece) is Content:
            return self._text_frame((event.index, "content"), piece.text)
        if type(piece) is Reasoning:
            return self._text_frame((event.index, self._reasoning_field), piece.text)
        return None

    def _text_choice(self, key: tuple[int, str], text: str) -> dict[str, Any]:
        index, field = key
        return {"index": index, "delta": {field: text}, "logprobs": None, "finish_reason": None}

    def event(self, event: ChoiceEvent) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        index = event.index
        ids = event.token_ids  # on the event's first chunk; [] on the rest
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
                delta = {"tool_calls": [{"index": k, **tool_call(piece)}]}
            else:  # pragma: no cover - Piece is closed
                continue
            choice: dict[str, Any] = {
                "index": index,
                "delta": delta,
                "logprobs": logprobs,
                "finish_reason": None,
            }
            if ids is not None:
                choice["token_ids"] = ids
                ids = []
            out.append(self._chunk(choice))
            logprobs = None
        finished = event.finished
        if finished is not None and finished.end is not End.CANCELLED:
            choice = {
                "index": index,
                "delta": {},
                "logprobs": logprobs,
                "finish_reason": finished.finish_reason,
                "stop_reason": finished.stop_reason,
            }
            if ids is not None:
                choice["token_ids"] = ids
            out.append(self._chunk(choice))
        return out


def chat_body(
    resp: StartedResponse,
    choices: list[Collected],
    reasoning_field: str,
    token_ids: bool = False,
    prompt_logprobs: int | None = None,
) -> dict[str, Any]:
    """The collected choices as one `chat.completion`; with `token_ids`
    (`return_token_ids`) each choice's ids and the prompt's, and with
    `prompt_logprobs` (the alternatives per prompt token) the prompt's
    logprobs, where vLLM puts them."""
    token_text = resp.token_text
    out = []
    for i, c in enumerate(choices):
        text = c.text()
        calls = c.tool_calls()
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if (not text and calls) else text,
        }
        reasoning = c.reasoning()
        if reasoning is not None:
            message[reasoning_field] = reasoning
        if calls:
            message["tool_calls"] = [tool_call(call) for call in calls]
        logprobs = None
        if token_text is not None and c.logprobs:
            logprobs = {
                "content": [chat_logprob(lp, token_text, resp.token_bytes) for lp in c.logprobs]
            }
        choice: dict[str, Any] = {
            "index": i,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": c.finish_reason,
            "stop_reason": c.stop_reason,
        }
        if token_ids:
            choice["token_ids"] = c.token_ids
        out.append(choice)
    u = resp.usage
    body: dict[str, Any] = {
        "id": resp.id,
        "object": "chat.completion",
        "created": resp.created,
        "model": resp.model,
        "choices": out,
        "usage": usage(u.prompt_tokens, u.completion_tokens, u.cached_tokens),
    }
    if prompt_logprobs is not None and token_text is not None and choices:
        body["prompt_logprobs"] = listed(choices[0].prompt_logprobs, prompt_logprobs, token_text)
    if token_ids:
        body["prompt_token_ids"] = resp.prompt_token_ids(0)
    return body


def tool_call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
