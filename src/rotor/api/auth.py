"""`--api-key`: /v1/* needs `Authorization: Bearer KEY` (or `x-api-key: KEY`)."""

from __future__ import annotations

import hmac
from typing import Any

from rotor.api.errors import error_response, is_anthropic


class APIKeyMiddleware:
    """Plain ASGI, so streaming responses pass through untouched."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.api_key = api_key.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            headers = dict(scope["headers"])
            auth = headers.get(b"authorization", b"")
            token = auth[7:] if auth[:7].lower() == b"bearer " else None
            if token is None:
                token = headers.get(b"x-api-key", b"") or None
            if token is None or not hmac.compare_digest(token, self.api_key):
                anthropic = is_anthropic(scope["path"], scope["headers"])
                response = error_response(401, "invalid or missing API key", anthropic=anthropic)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
