"""Route plumbing every API shares: reading and validating a body, request ids,
starting a response on the frontend, metrics around its chunk stream, and the
route body itself (`respond`): a stream in the API's SSE framing, or the same
events folded into one body."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import orjson
from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from rotor.api.errors import APIError, describe_validation, error_response
from rotor.api.metrics import Metrics
from rotor.api.sse import INTERNAL_ERROR, Framing, SSEResponse, race_disconnect
from rotor.frontend import Frontend, ModelNotFound
from rotor.frontend import Response as ChatResponse
from rotor.pipeline.preprocess import RequestError
from rotor.pipeline.stream import RequestFailed
from rotor.protocol.openai import ChatCompletionRequest

DEFAULT_BODY_LIMIT = 32 * 1024 * 1024

# The `model` label of requests for a model that is not served: clients choose
# that name, so it must not become a label value (one time series per typo).
UNKNOWN_MODEL = "unknown"


def request_id(request: Request) -> str:
    """The client's `x-request-id` when it is a sane token, else a new one;
    the same for every caller within one request (error responses included)."""
    rid = getattr(request.state, "request_id", None)
    if rid is None:
        rid = request.headers.get("x-request-id")
        if not (rid and len(rid) <= 128 and rid.replace("-", "").replace("_", "").isalnum()):
            rid = uuid.uuid4().hex
        request.state.request_id = rid
    return rid


M = TypeVar("M", bound=BaseModel)


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The JSON object body: 413 over `limit` bytes, 400 when it is not a JSON object."""
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
    return data


async def read_request(request: Request, model: type[M], limit: int) -> M:
    """The JSON body validated as `model`: 413 over `limit`, 400 naming bad fields."""
    data = await read_json(request, limit)
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


async def start(
    call: Callable[[Any, str], Awaitable[ChatResponse]],
    req: Any,
    rid: str,
    metrics: Metrics,
    endpoint: str,
    frontend: Frontend,
    params: dict[str, str] | None = None,
) -> ChatResponse:
    """Run `call(req, rid)` (Frontend.chat or .completion). A request it refuses
    is counted and raised as an APIError, its `param` renamed to the client
    API's field (`params`)."""
    try:
        return await call(req, rid)
    except RequestError as e:
        metrics.requests.labels(
            frontend.model.card.name, endpoint, str(req.stream), str(e.status)
        ).inc()
        param = (params or {}).get(e.param or "", e.param)
        raise APIError(e.status, str(e), param) from None
    except ModelNotFound as e:
        metrics.requests.labels(UNKNOWN_MODEL, endpoint, str(req.stream), "404").inc()
        raise APIError(404, str(e), "model") from None


async def observed(
    resp: ChatResponse, metrics: Metrics, endpoint: str, stream: bool, t0: float
) -> AsyncGenerator[dict[str, Any], None]:
    """`resp.chunks` with the request's metrics: in flight, TTFT and inter-token
    latency (streaming; timed when engine events bring generated pieces, see
    `Response.on_pieces`), outcome, tokens, duration."""
    model = resp.model
    metrics.in_flight.labels(model).inc()
    perf = time.perf_counter
    if stream:
        ttft, itl = metrics.ttft.labels(model), metrics.itl.labels(model)
        last = 0.0

        def token() -> None:
            nonlocal last
            now = perf()
            if last:
                itl.observe(now - last)
            else:
                ttft.observe(now - t0)
            last = now

        resp.on_pieces = token
    status = "200"
    try:
        async for chunk in resp.chunks:
            yield chunk
    except Exception:  # RequestFailed, or a bug
        status = "500"
        raise
    except BaseException:  # the client went away (cancelled, or the stream was closed)
        status = "cancelled"
        raise
    finally:
        await resp.chunks.aclose()  # type: ignore[attr-defined]
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

    work = await race_disconnect(gather_all(), request.receive)
    if work is None:
        on_disconnect()
        raise ClientGone
    return work.result()


def client_gone() -> Response:
    """What a vanished client 'gets' (nobody reads it): nginx's 499."""
    return Response(status_code=499)


def disconnect_counter(metrics: Metrics, model: str) -> Callable[[], None]:
    return lambda: metrics.disconnected.labels(model).inc()


@dataclass
class APIView:
    """How one API presents one chat response: its SSE framing, the fold that
    makes the non-streaming body of the same events (RequestFailed: a 500),
    and its own events for the chat chunks (None: the chunks themselves)."""

    framing: Framing
    fold: Callable[[list[dict[str, Any]]], dict[str, Any]]
    shaper: EventShaper | None = None


async def respond(
    request: Request,
    frontend: Frontend,
    metrics: Metrics,
    endpoint: str,
    req: Any,
    view: Callable[[ChatResponse, str], APIView],
    *,
    call: Callable[[Any, str], Awaitable[ChatResponse]] | None = None,
    params: dict[str, str] | None = None,
) -> Response:
    """The route body every API shares: `req` (a chat request, or a completions
    request with `call=frontend.completion`) started under the request's id,
    observed, then streamed in the view's framing or collected and folded."""
    rid = request_id(request)
    headers = {"x-request-id": rid}
    t0 = time.perf_counter()
    resp = await start(call or frontend.chat, req, rid, metrics, endpoint, frontend, params)
    api = view(resp, rid)
    events = observed(resp, metrics, endpoint, req.stream, t0)
    if api.shaper is not None:
        events = shaped_events(api.shaper, events)
    gone = disconnect_counter(metrics, resp.model)
    if req.stream:
        failure = lambda: api.framing.failure(INTERNAL_ERROR)  # noqa: E731
        return SSEResponse(api.framing.body(events), headers, gone, failure)
    try:
        body = api.fold(await collect(request, events, gone))
    except ClientGone:
        return client_gone()
    except RequestFailed as e:
        return error_response(500, str(e), headers=headers)
    return Response(orjson.dumps(body), media_type="application/json", headers=headers)
