"""`--api-key`: /v1/*, /tokenize, /detokenize and vLLM's scoring paths
outside /v1/ (/score, /rerank, /v2/rerank) need `Authorization: Bearer KEY`
(or `x-api-key: KEY`). The probes (/live, /health, /metrics), the API's own
description (/openapi.json, /docs, /redoc and their assets under /docs/assets,
api/docs.py) and the chat page (/, which asks for the key itself) stay open:
orchestrators, scrapers and browsers call them without
credentials, and they do no work a client could make expensive. The KServe gRPC API
(api/kserve) checks the same credentials, sent as metadata (`check_key`)."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from rotor.api.errors import APIError, error_response, is_anthropic

# Paths outside /v1/ that do real work (tokenizing, rendering, scoring) and need the key.
_GUARDED = frozenset({"/tokenize", "/detokenize", "/score", "/rerank", "/v2/rerank"})
_CREDENTIALS = (b"authorization", b"x-api-key")


def guarded(path: str) -> bool:
    return path.startswith("/v1/") or path in _GUARDED


class APIKeyMiddleware:
    """Plain ASGI, so streaming responses pass through untouched."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        if not api_key:
            raise ValueError("the API key must not be empty")
        self.app = app
        self.api_key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and guarded(scope["path"]):
            error = check_key(scope["headers"], self.api_key)
            if error is not None:
                anthropic = is_anthropic(scope["path"], scope["headers"])
                response = error_response(error.status, error.message, anthropic=anthropic)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def check_key(headers: Iterable[tuple[bytes, bytes]], api_key: bytes) -> APIError | None:
    """Why a request's credentials are refused (401; 400 for a credential
    header sent twice: which one counts would depend on the proxy in front);
    None when they are good."""
    found: dict[bytes, bytes] = {}
    for name, value in headers:
        name = name.lower()
        if name in _CREDENTIALS:
            if name in found:
                return APIError(400, f"duplicate {name.decode()} header")
            found[name] = value
    auth = found.get(b"authorization", b"")
    token = auth[7:] if auth[:7].lower() == b"bearer " else None
    if token is None:
        token = found.get(b"x-api-key") or None
    if token is None or not hmac.compare_digest(token, api_key):
        return APIError(401, "invalid or missing API key")
    return None
