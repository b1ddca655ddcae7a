"""Error responses on Anthropic requests leave in Anthropic's envelope,
whoever wrote them: the `AnthropicErrors` ASGI middleware rewrites rotor's
OpenAI envelope on the way out.
"""

from __future__ import annotations

from typing import Any

import orjson

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def _is_anthropic(scope: dict[str, Any]) -> bool:
    path: str = scope["path"]
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return True
    return path.startswith("/v1/") and any(k == b"anthropic-version" for k, _ in scope["headers"])


def _translate(status: int, body: bytes) -> bytes:
    """The OpenAI envelope rotor writes → `{"type": "error", "error": {type, message}}`."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict) or data.get("type") == "error":
        return body
    message = error.get("message") or f"HTTP {status}"
    return orjson.dumps(
        {"type": "error", "error": {"type": error_type(status), "message": message}}
    )


class AnthropicErrors:
    """ASGI: error responses on Anthropic requests leave in Anthropic's envelope,
    whoever wrote them — validation, `--api-key`, routing, the pipeline. Only
    responses with status >= 400 are held and rewritten; streams pass through."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not _is_anthropic(scope):
            await self.app(scope, receive, send)
            return
        held: dict[str, Any] | None = None
        body: list[bytes] = []

        async def send_enveloped(message: dict[str, Any]) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] >= 400:
                held = message
                return
            if held is None or message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            payload = _translate(held["status"], b"".join(body))
            headers = [(k, v) for k, v in held.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(payload)).encode()))
            await send({**held, "headers": headers})
            await send({"type": "http.response.body", "body": payload})

        await self.app(scope, receive, send_enveloped)
