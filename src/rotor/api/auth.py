"""`--api-key`: /v1/*, /tokenize and /detokenize need `Authorization: Bearer KEY`
(or `x-api-key: KEY`). The probes (/live, /health, /metrics), the API's own
description (/openapi.json, /docs, /redoc and their assets under /docs/assets,
api/docs.py) and the chat page (/, which asks for the key itself) stay open:
orchestrators, scrapers and browsers call them without
credentials, and they do no work a client could make expensive."""

from __future__ import annotations

import hmac
from typing import Any

from rotor.api.errors import error_response, is_anthropic

# Paths outside /v1/ that do real work (tokenizing, rendering) and need the key.
_GUARDED = frozenset({"/tokenize", "/detokenize"})
_CREDENTIALS = (b"authorization", b"x-api-key")


def guarded(path: str) -> bool:
    return path.startswith("/v1/") or path in _GUARDED


class APIKeyMiddleware:
    """Plain ASGI, so streaming responses pass through untouched."""

    def __init__(self, app: Any, api_key: str) -> None:
        if not api_key:
            raise ValueError("the API key must not be empty")
        self.app = app
        self.api_key = api_key.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and guarded(scope["path"]):
            message = self._refusal(scope["headers"])
            if message is not None:
                status = 400 if message.startswith("duplicate") else 401
                anthropic = is_anthropic(scope["path"], scope["headers"])
                response = error_response(status, message, anthropic=anthropic)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, raw: list[tuple[bytes, bytes]]) -> str | None:
        """Why the request's credentials are refused; None when they are good.
        A credential header sent twice is refused: which one counts would
        depend on the proxy in front."""
        found: dict[bytes, bytes] = {}
        for name, value in raw:
            name = name.lower()
            if name in _CREDENTIALS:
                if name in found:
                    return f"duplicate {name.decode()} header"
                found[name] = value
        auth = found.get(b"authorization", b"")
        token = auth[7:] if auth[:7].lower() == b"bearer " else None
        if token is None:
            token = found.get(b"x-api-key") or None
        if token is None or not hmac.compare_digest(token, self.api_key):
            return "invalid or missing API key"
        return None
