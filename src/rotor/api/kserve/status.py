"""Errors as gRPC status codes, and `--api-key` as metadata.

Whatever refuses a request is first the HTTP error it would be
(`api_error`, api/errors.py), so the message is HTTP's word for word; its
status then picks the code. An error's headers (Retry-After, where it was
routed) travel as trailing metadata. A bug is INTERNAL with no internal
text (the log has it)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, NoReturn

import grpc

from rotor.api.auth import APIKeys, check_key
from rotor.api.errors import INTERNAL_ERROR, REFUSALS, APIError, api_error

log = logging.getLogger("rotor.api")

_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    529: grpc.StatusCode.UNAVAILABLE,  # every worker overloaded (--overload-status 529)
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def grpc_code(status: int) -> grpc.StatusCode:
    """The gRPC code of an HTTP status."""
    code = _CODES.get(status)
    if code is not None:
        return code
    return grpc.StatusCode.INTERNAL if status >= 500 else grpc.StatusCode.INVALID_ARGUMENT


def as_api_error(error: Exception) -> APIError:
    """What a client is told of `error`: a refusal's HTTP error, else (a bug) a 500."""
    if isinstance(error, (APIError, *REFUSALS)):
        return api_error(error)
    log.error("a KServe request failed", exc_info=error)
    return APIError(500, INTERNAL_ERROR)


async def abort(context: grpc.aio.ServicerContext, error: APIError) -> NoReturn:
    """End the call with the error's code and message (raises)."""
    trailers = tuple((k.lower(), v) for k, v in error.headers.items())
    await context.abort(grpc_code(error.status), error.message, trailing_metadata=trailers)
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


def key_refusal(metadata: Iterable[Any], keys: APIKeys) -> APIError | None:
    """`--api-key` over gRPC: `authorization: Bearer KEY` (or `x-api-key:
    KEY`) metadata, checked as HTTP checks its headers (any of the keys)."""
    headers = [
        (k.encode(), v.encode() if isinstance(v, str) else v)
        for k, v in metadata
        if not k.endswith("-bin")
    ]
    found = check_key(headers, keys)
    return found if isinstance(found, APIError) else None
