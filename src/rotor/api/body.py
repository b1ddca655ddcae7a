"""Reading a request: its id, its JSON body (with the size limit), and the
body validated as an API's request model."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, TypeVar

import orjson
from fastapi import Request
from pydantic import BaseModel, ValidationError

from rotor.api.access_state import note_model
from rotor.api.errors import APIError
from rotor.pipeline.errors import describe_validation
from rotor.protocol.openai import MAX_SESSION_ID, ChatCompletionRequest

DEFAULT_BODY_LIMIT = 32 * 1024 * 1024
# Bodies past this are parsed and validated on a thread: a legal 10 MB body
# takes the better part of a second to turn into a model, and the event loop
# must keep serving every other stream (and /live) meanwhile.
OFF_LOOP_BYTES = 1024 * 1024

M = TypeVar("M", bound=BaseModel)


def request_id(request: Request) -> str:
    """The client's `x-request-id` when it is a sane token, else a new one;
    the same for every caller within one request (error responses included)."""
    rid = getattr(request.state, "request_id", None)
    if rid is None:
        rid = client_request_id(request.headers.get("x-request-id"))
        request.state.request_id = rid
    return rid


def client_request_id(given: str | None) -> str:
    """A client's request id when it is a sane token (at most 128 letters,
    digits, `-` and `_`), else a new one."""
    if given and len(given) <= 128 and given.replace("-", "").replace("_", "").isalnum():
        return given
    return uuid.uuid4().hex


SESSION_HEADER = "x-rotor-session-id"


def apply_session(request: Request, req: Any) -> None:
    """The `x-rotor-session-id` header as the request's `session_id` (the
    body field of the same meaning): a 400 when it is empty, too long, or
    disagrees with the body's."""
    header = request.headers.get(SESSION_HEADER)
    if header is None:
        return
    if not header or len(header) > MAX_SESSION_ID:
        raise APIError(
            400, f"{SESSION_HEADER} must be 1 to {MAX_SESSION_ID} characters", SESSION_HEADER
        )
    body = req.session_id
    if body is not None and body != header:
        raise APIError(
            400,
            f"{SESSION_HEADER} {header!r} and session_id {body!r} disagree: send one",
            "session_id",
        )
    req.session_id = header


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The JSON object body: 413 over `limit` bytes, 400 when it is not a JSON
    object or is declared as something else (`text/plain`, a form): like
    OpenAI, a body is read as JSON only when it says so, or says nothing."""
    data, _ = await _read_json(request, limit)
    return data


async def _read_json(request: Request, limit: int) -> tuple[dict[str, Any], int]:
    """The JSON object body and its size in bytes (a big one parsed off the loop)."""
    raw = await read_body(request, limit)
    data = (
        await asyncio.to_thread(parse_json, raw) if len(raw) > OFF_LOOP_BYTES else parse_json(raw)
    )
    note_model(request, data.get("model"), data.get("stream"))
    return data, len(raw)


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body of a request declared as JSON (or undeclared), within `limit`."""
    kind = request.headers.get("content-type")
    if kind is not None and not is_json_type(kind):
        raise APIError(
            400,
            f"the request body must be JSON (Content-Type: application/json), got {kind!r}",
        )
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise APIError(413, f"request body of {length} bytes is over the limit of {limit}")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(raw: bytes) -> dict[str, Any]:
    """`raw` as a JSON object, or the client's 400."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise APIError(400, f"malformed JSON body: {e}") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    return data


def is_json_type(content_type: str) -> bool:
    """`application/json` or any `application/*+json`, parameters ignored."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def validated(model: type[M], data: dict[str, Any]) -> M:
    """`data` as `model`; what validation rejects is the client's 400 naming the field."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        message, param = describe_validation(e)
        raise APIError(400, message, param) from None
    except (TypeError, KeyError, AttributeError, IndexError) as e:
        # A validator that met a type it did not expect: still the client's data.
        raise APIError(400, f"invalid request: {e}") from None


async def read_request(request: Request, model: type[M], limit: int) -> M:
    """The JSON body validated as `model`: 413 over `limit`, 400 naming bad fields."""
    data, size = await _read_json(request, limit)
    if size > OFF_LOOP_BYTES:
        return await asyncio.to_thread(validated, model, data)
    return validated(model, data)


def internal_chat(fields: dict[str, Any]) -> ChatCompletionRequest:
    """The internal chat request built from another API's request, which was
    validated as that API's (None: absent, the chat default holds). It is
    not validated again: every value comes from the validated request, in
    the form the chat model keeps it (its validators leave such values as
    they are), so the client's errors are named in its own API's terms."""
    return ChatCompletionRequest.model_construct(
        **{k: v for k, v in fields.items() if v is not None}
    )
