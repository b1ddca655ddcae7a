"""What OpenAI's two chunk shapers share: the chunk head, running usage
(`continuous_usage_stats`), the closing usage chunk, the error event."""

from __future__ import annotations

from typing import Any

import orjson

from rotor.api.errors import APIError, error_body
from rotor.api.openai.usage import usage
from rotor.api.sse import HOLE, sse_event, template
from rotor.frontend import StartedResponse


class OpenAIShaper:
    __slots__ = ("_resp", "_head", "_include_usage", "_continuous", "_templates")

    def __init__(
        self, resp: StartedResponse, kind: str, include_usage: bool, continuous_usage: bool
    ) -> None:
        self._resp = resp
        self._head = {"id": resp.id, "object": kind, "created": resp.created, "model": resp.model}
        self._include_usage = include_usage
        self._continuous = continuous_usage
        # a text chunk's SSE bytes before and after its text, per key (`_text_frame`)
        self._templates: dict[Any, tuple[bytes, ...] | None] = {}

    def _chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        out = {**self._head, "choices": [choice]}
        if self._continuous:
            u = self._resp.usage
            out["usage"] = usage(u.prompt_tokens, u.completion_tokens)
        return out

    def _text_choice(self, key: Any, text: str) -> dict[str, Any]:
        """A chunk's choice that carries only `text`, as the shaper's `key`
        (a choice index, and which field) says."""
        raise NotImplementedError

    def _text_frame(self, key: Any, text: str) -> bytes | None:
        """The SSE bytes of the chunk whose choice is `_text_choice(key, text)`,
        from a template made once per key: what `sse_event(self._chunk(...))`
        gives, without building the chunk. None when usage rides on every
        chunk (it changes every time)."""
        if self._continuous:
            return None
        templates = self._templates
        if key in templates:
            parts = templates[key]
        else:
            framed = sse_event(self._chunk(self._text_choice(key, HOLE)))
            parts = templates[key] = template(framed)
        if parts is None:
            return None
        return parts[0] + orjson.dumps(text) + parts[1]

    def start(self) -> list[dict[str, Any]]:
        return []

    def fail(self, error: APIError) -> list[dict[str, Any]]:
        return [error_body(error.status, error.message, error.param)]

    def finish(self) -> list[dict[str, Any]]:
        if not self._include_usage:
            return []
        u = self._resp.usage
        return [
            {
                **self._head,
                "choices": [],
                "usage": usage(u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            }
        ]
