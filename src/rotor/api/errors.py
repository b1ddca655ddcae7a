"""One error envelope everywhere, as OpenAI sends it."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError
from starlette.responses import Response

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "overloaded_error",
}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": _TYPES.get(
                status, "server_error" if status >= 500 else "invalid_request_error"
            ),
            "param": param,
            "code": status,
        }
    }


def error_response(
    status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps(error_body(status, message, param)),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def describe_validation(error: ValidationError) -> tuple[str, str | None]:
    """A message naming the offending field(s), and the first field as `param`."""
    parts = []
    param = None
    for e in error.errors():
        loc = ".".join(str(x) for x in e["loc"] if not (isinstance(x, str) and "[" in x))
        if param is None:
            param = loc or None
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown field {loc!r}")
        elif e["type"] == "missing":
            parts.append(f"missing required field {loc!r}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts) or "invalid request", param
