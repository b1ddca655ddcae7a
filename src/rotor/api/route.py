"""Route plumbing every API shares: reading and validating a body, request ids,
starting a chat on the frontend, metrics around a chunk stream, SSE framing."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import orjson
from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from rotor.api.errors import APIError, describe_validation
from rotor.api.metrics import Metrics
from rotor.api.sse import wait_disconnect
from rotor.frontend import Frontend, ModelNotFound
from rotor.frontend import Response as ChatResponse
from rotor.pipeline.preprocess import RequestError
from rotor.pipeline.stream import RequestFailed
from rotor.protocol.openai import ChatCompletionRequest

DEFAULT_BODY_LIMIT = 32 * 1024 * 1024


def request_id(request: Request) -> str:
    """The client's `x-request-id` when it is a sane token, else a new one."""
    rid = request.headers.get("x-request-id")
    if rid and len(rid) <= 128 and rid.replace("-", "").replace("_", "").isalnum():
        return rid
    return uuid.uuid4().hex


M = TypeVar("M", bound=BaseModel)


async def read_request(request: Request, model: type[M], limit: int) -> M:
    """The JSON body validated as `model`: 413 over `limit`, 400 naming bad fields."""
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
    try:
        data = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as e:
        raise APIError(400, f"malformed JSON body: {e}") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        message, param = describe_validation(e)
        raise APIError(400, message, param) from None


def chat_request(fields: dict[str, Any]) -> ChatCompletionRequest:
    """The internal chat request; what chat validation rejects is the client's 400."""
    try:
        return ChatCompletionRequest.model_validate(
            {k: v for k, v in fields.items() if v is not None}
        )
    except ValidationError as e:
        message, param = describe_validation(e)
        raise APIError(400, message, param) from None


async def start_chat(
    frontend: Frontend,
    chat: ChatCompletionRequest,
    rid: str,
    metrics: Metrics,
    endpoint: str,
    params: dict[str, str] | None = None,
) -> ChatResponse:
    """`Frontend.chat`; a request it refuses is counted and raised as an APIError,
    its `param` renamed to the client API's field (`params`)."""
    return await start(frontend.chat, chat, rid, metrics, endpoint, frontend, params)


async def start(
    call: Callable[[Any, str], Awaitable[ChatResponse]],
    req: Any,
    rid: str,
    metrics: Metrics,
    endpoint: str,
    frontend: Frontend,
    params: dict[str, str] | None = None,
) -> ChatResponse:
    """Run `call(req, rid)` (Frontend.chat or .completion); refusals become APIErrors."""
    model = req.model or frontend.model.card.name
    try:
        return await call(req, rid)
    except RequestError as e:
        metrics.requests.labels(model, endpoint, str(req.stream), str(e.status)).inc()
        param = (params or {}).get(e.param or "", e.param)
        raise APIError(e.status, str(e), param) from None
    except ModelNotFound as e:
        metrics.requests.labels(model, endpoint, str(req.stream), "404").inc()
        raise APIError(404, str(e), "model") from None


async def observed(
    resp: ChatResponse, metrics: Metrics, endpoint: str, stream: bool, t0: float
) -> AsyncGenerator[dict[str, Any], None]:
    """`resp.chunks` with the request's metrics, as chat records them: in flight,
    TTFT and inter-token latency (streaming), outcome, tokens, duration."""
    model = resp.model
    metrics.in_flight.labels(model).inc()
    ttft, itl = metrics.ttft.labels(model), metrics.itl.labels(model)
    perf = time.perf_counter
    last = 0.0
    status = "200"
    try:
        async for chunk in resp.chunks:
            if stream:
                now = perf()
                if last:
                    itl.observe(now - last)
                else:
                    ttft.observe(now - t0)
                last = now
            yield chunk
    except RequestFailed:
        status = "500"
        raise
    except BaseException:
        status = "cancelled"
        raise
    finally:
        await resp.chunks.aclose()
        metrics.in_flight.labels(model).dec()
        metrics.requests.labels(model, endpoint, str(stream), status).inc()
        metrics.prompt_tokens.labels(model).inc(resp.usage.prompt_tokens)
        metrics.completion_tokens.labels(model).inc(
            sum(c.decoder.tokens for p in resp.prepared for c in p.choices)
        )
        metrics.duration.labels(model).observe(perf() - t0)


class EventShaper(Protocol):
    """An API's view of one chat stream: its own events for each chat chunk."""

    def start(self) -> list[dict[str, Any]]: ...

    def chunk(self, chunk: dict[str, Any]) -> list[dict[str, Any]]: ...

    def fail(self, message: str) -> list[dict[str, Any]]: ...

    def finish(self) -> list[dict[str, Any]]: ...


async def shaped_events(
    shaper: EventShaper, chunks: AsyncGenerator[dict[str, Any], None]
) -> AsyncGenerator[dict[str, Any], None]:
    """The whole event stream of one response in an API's own shape; a pipeline
    failure becomes the API's failure events (the stream has begun: no status)."""
    try:
        for event in shaper.start():
            yield event
        try:
            async for chunk in chunks:
                for event in shaper.chunk(chunk):
                    yield event
        except RequestFailed as e:
            for event in shaper.fail(str(e)):
                yield event
            return
        for event in shaper.finish():
            yield event
    finally:
        await chunks.aclose()


class ClientGone(Exception):
    """The client disconnected before its non-streaming response was ready."""


async def collect(
    request: Request, items: AsyncGenerator[Any, None], on_disconnect: Callable[[], None]
) -> list[Any]:
    """All of `items` — unless the client goes away first: then the work is
    cancelled at once (closing the pipeline aborts the engine) and ClientGone
    is raised. Non-streaming responses need this as much as streams do."""

    async def gather_all() -> list[Any]:
        return [item async for item in items]

    work = asyncio.ensure_future(gather_all())
    watch = asyncio.ensure_future(wait_disconnect(request.receive))
    try:
        done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work, watch):
            if not task.done():
                task.cancel()
        await asyncio.gather(work, watch, return_exceptions=True)
    if work in done:
        return work.result()
    on_disconnect()
    raise ClientGone


def client_gone() -> Response:
    """What a vanished client 'gets' (nobody reads it): nginx's 499."""
    return Response(status_code=499)


def sse(event: dict[str, Any]) -> bytes:
    """One named SSE event, as Anthropic and the Responses API send them."""
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


async def sse_body(
    events: AsyncGenerator[dict[str, Any], None],
) -> AsyncGenerator[bytes, None]:
    try:
        async for event in events:
            yield sse(event)
    finally:
        await events.aclose()


def disconnect_counter(metrics: Metrics, model: str) -> Any:
    return lambda: metrics.disconnected.labels(model).inc()
