"""What OpenAI's two chunk shapers share: the chunk head, running usage
(`continuous_usage_stats`), the closing usage chunk, the error event."""

from __future__ import annotations

from typing import Any

from rotor.api.errors import APIError, error_body
from rotor.api.openai.usage import usage
from rotor.frontend import StartedResponse


class OpenAIShaper:
    __slots__ = ("_resp", "_head", "_include_usage", "_continuous")

    def __init__(
        self, resp: StartedResponse, kind: str, include_usage: bool, continuous_usage: bool
    ) -> None:
        self._resp = resp
        self._head = {"id": resp.id, "object": kind, "created": resp.created, "model": resp.model}
        self._include_usage = include_usage
        self._continuous = continuous_usage

    def _chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        out = {**self._head, "choices": [choice]}
        if self._continuous:
            u = self._resp.usage
            out["usage"] = usage(u.prompt_tokens, u.completion_tokens)
        return out

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
