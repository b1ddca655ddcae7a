"""`--api-key`: /v1/*, /tokenize, /detokenize and vLLM's scoring paths
outside /v1/ (/score, /rerank, /v2/rerank) need `Authorization: Bearer KEY`
(or `x-api-key: KEY`). The probes (/live, /health, /metrics), the API's own
description (/openapi.json, /docs, /redoc and their assets under /docs/assets,
api/docs.py) and the chat page (/, which asks for the key itself) stay open:
orchestrators, scrapers and browsers call them without
credentials, and they do no work a client could make expensive. The KServe gRPC API
(api/kserve) checks the same credentials, sent as metadata (`check_key`).

`--api-key` may be given several times: any of the keys is let in, and each
key is a tenant of its own. The request's tenant (`TENANT_SCOPE_KEY` in its
ASGI scope, what api/responses/store.tenant_of reads) is a digest of the key
that matched, never the key: stored responses are kept under it, so one
key's conversations are not found with another, and the stores (a file, a
NATS bucket) never hold a key. Being a plain hash, it is the same on every
frontend and across restarts; keys should be random (a hash of a guessable
key can be guessed back)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from rotor.api.errors import APIError, error_response, is_anthropic
from rotor.protocol.response_store import TENANT_SCOPE_KEY

# Paths outside /v1/ that do real work (tokenizing, rendering, scoring) and need the key.
_GUARDED = frozenset({"/tokenize", "/detokenize", "/score", "/rerank", "/v2/rerank"})
_CREDENTIALS = (b"authorization", b"x-api-key")


def guarded(path: str) -> bool:
    return path.startswith("/v1/") or path in _GUARDED


TENANT_HEX = 32  # a tenant: the first 128 bits of the key's digest, in hex
_TENANT_DOMAIN = b"rotor tenant\0"  # the digest is of this and the key: no other hash's


def tenant_of_key(key: str) -> str:
    """The tenant a key stands for: its digest (never the key itself)."""
    return hashlib.sha256(_TENANT_DOMAIN + key.encode()).hexdigest()[:TENANT_HEX]


class APIKeys:
    """The keys a server takes (`--api-key`, one or several), each with its
    tenant. A key is one string or several; none, or an empty one, is a
    ValueError: auth is never off by mistake."""

    def __init__(self, keys: str | Sequence[str]) -> None:
        listed = [keys] if isinstance(keys, str) else list(keys)
        if not listed or not all(listed):
            raise ValueError("the API key must not be empty")
        self._keys = [(key.encode(), tenant_of_key(key)) for key in listed]

    def tenant(self, token: bytes) -> str | None:
        """The tenant of the key `token` is, or None. Every key is compared
        (in constant time), whichever matches: the time taken says nothing of
        which one did."""
        found = None
        for key, tenant in self._keys:
            if hmac.compare_digest(token, key):
                found = tenant
        return found


class APIKeyMiddleware:
    """Plain ASGI, so streaming responses pass through untouched."""

    def __init__(self, app: ASGIApp, api_key: str | Sequence[str]) -> None:
        self.app = app
        self.keys = APIKeys(api_key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and guarded(scope["path"]):
            tenant = check_key(scope["headers"], self.keys)
            if isinstance(tenant, APIError):
                anthropic = is_anthropic(scope["path"], scope["headers"])
                response = error_response(tenant.status, tenant.message, anthropic=anthropic)
                await response(scope, receive, send)
                return
            scope[TENANT_SCOPE_KEY] = tenant
        await self.app(scope, receive, send)


def check_key(headers: Iterable[tuple[bytes, bytes]], keys: APIKeys) -> str | APIError:
    """The tenant of the key a request's credentials match; else why they are
    refused (401; 400 for a credential header sent twice: which one counts
    would depend on the proxy in front)."""
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
    tenant = keys.tenant(token) if token is not None else None
    if tenant is None:
        return APIError(401, "invalid or missing API key")
    return tenant
