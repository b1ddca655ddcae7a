"""Error responses: one exception (`APIError`), two envelopes (OpenAI's, and
Anthropic's on Anthropic requests), and the one place where what the
frontend raises becomes an HTTP status (`api_error`).

Which envelope is decided by the request itself (`is_anthropic`), so every
writer — validation, auth, routing, the pipeline — produces the right one
directly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from starlette.responses import Response

from rotor.api.admission import Overloaded
from rotor.frontend import ModelNotFound
from rotor.pipeline.errors import RequestError
from rotor.pipeline.events import Failure, ResponseFailed

log = logging.getLogger("rotor.api")

# What a client is told when something broke inside (the log has the details).
INTERNAL_ERROR = "internal server error"
# The statuses of a refusal because every worker is overloaded: 503 (rotor's
# default, what other clients retry) or 529 (Anthropic's "overloaded", and
# Dynamo's default): `--overload-status`.
OVERLOAD_STATUSES = (503, 529)
UNAVAILABLE = "the engine serving this model is unavailable; retry later"
RETRY_AFTER_S = "1"

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "overloaded_error",
    529: "overloaded_error",
}

_ANTHROPIC_TYPES = {
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


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.headers = headers or {}


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's envelope."""
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def anthropic_error_type(status: int) -> str:
    return _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": anthropic_error_type(status), "message": message}}


def is_anthropic(path: str, headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Anthropic's routes, and any /v1/ request that carries `anthropic-version`."""
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return True
    return path.startswith("/v1/") and any(k == b"anthropic-version" for k, _ in headers)


def error_response(
    status: int,
    message: str,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
    anthropic: bool = False,
) -> Response:
    body = (
        anthropic_error_body(status, message) if anthropic else error_body(status, message, param)
    )
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


# What `api_error` turns into a status: everything the frontend raises for a
# request it will not (or cannot) serve.
REFUSALS = (Overloaded, ModelNotFound, RequestError, ResponseFailed)


def api_error(
    error: Exception, params: dict[str, str] | None = None, overload_status: int = 503
) -> APIError:
    """The HTTP error for what starting (or collecting) a response raised:
    overloaded → 503 with Retry-After; an unknown model → 404; a refused
    request → 400 naming its field (renamed to the client API's by `params`);
    a failed response → `client_error` (`overload_status`: every worker
    overloaded). An APIError is itself."""
    if isinstance(error, APIError):
        return error
    if isinstance(error, Overloaded):
        return APIError(503, str(error), None, {"retry-after": str(error.retry_after)})
    if isinstance(error, ModelNotFound):
        return APIError(404, str(error), "model")
    if isinstance(error, RequestError):
        return from_request_error(error, params)
    if isinstance(error, ResponseFailed):
        return client_error(error.failure, params, overload_status)
    raise TypeError(f"not a refusal: {type(error).__name__}")


def from_request_error(error: RequestError, params: dict[str, str] | None = None) -> APIError:
    """A refused request: 400, its field renamed to the client API's (`params`)."""
    param = (params or {}).get(error.param or "", error.param)
    return APIError(400, str(error), param)


def client_error(
    failure: Failure, params: dict[str, str] | None = None, overload_status: int = 503
) -> APIError:
    """What a client is told of a failed response: refused → 400 naming the
    field; unavailable → 503 with Retry-After (every worker overloaded:
    `overload_status`, 503 or 529, `--overload-status`); internal → 500 with
    a generic message (the real one is logged here); malformed output → 500
    naming it."""
    if failure.kind == "refused":
        param = (params or {}).get(failure.param or "", failure.param)
        return APIError(400, failure.message, param)
    if failure.kind == "unavailable":  # says which model or worker, nothing internal
        message = failure.message or UNAVAILABLE
        if failure.cause == "overloaded":  # (counted in rotor_router_overloaded_total)
            return APIError(overload_status, message, None, {"retry-after": RETRY_AFTER_S})
        log.warning("engine unavailable: %s", failure.message)
        return APIError(503, message, None, {"retry-after": RETRY_AFTER_S})
    if failure.kind == "malformed":
        return APIError(500, failure.message)
    log.error("response failed: %s", failure.message)
    return APIError(500, INTERNAL_ERROR)
