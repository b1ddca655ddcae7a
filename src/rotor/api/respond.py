"""The route body every API shares: start the response on the frontend, shape
its internal events in the API's way, then stream them in the API's SSE
framing or collect and fold them into one body — so a non-streaming response
is always the fold of the stream it would have sent."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from fastapi import Request
from starlette.responses import Response

from rotor.admission import Admission, Overloaded
from rotor.api.access_state import note_response
from rotor.api.body import request_id
from rotor.api.drain import SHUTTING_DOWN
from rotor.api.errors import INTERNAL_ERROR, APIError, client_error, from_request_error
from rotor.api.metrics import Metrics
from rotor.api.observe import flag, observed
from rotor.api.sse import Framing, SSEResponse, race_disconnect
from rotor.frontend import Frontend, ModelNotFound, ResponseFailed
from rotor.frontend import Response as StartedResponse
from rotor.pipeline.errors import RequestError
from rotor.pipeline.events import ChoiceEvent

# The `model` label of requests for a model that is not served: clients choose
# that name, so it must not become a label value (one time series per typo).
UNKNOWN_MODEL = "unknown"


class EventShaper(Protocol):
    """An API's view of one response: its own events for the internal ones."""

    def start(self) -> list[dict[str, Any]]: ...

    def event(self, event: ChoiceEvent) -> list[dict[str, Any]]: ...

    def fail(self, error: APIError) -> list[dict[str, Any]]:
        """The events that end a stream that failed after it began."""
        ...

    def finish(self) -> list[dict[str, Any]]: ...


@dataclass
class APIView:
    """How one API presents one response: its shaper, its SSE framing, and
    the fold that makes the non-streaming body of the shaped events."""

    shaper: EventShaper
    framing: Framing
    fold: Callable[[list[dict[str, Any]]], dict[str, Any]]


async def shaped(
    shaper: EventShaper, events: AsyncGenerator[ChoiceEvent, None], stream: bool
) -> AsyncGenerator[dict[str, Any], None]:
    """The API's events for one response. A failure after the start is the
    API's failure events when streaming; collecting, it is raised (a status)."""
    try:
        for out in shaper.start():
            yield out
        try:
            async for event in events:
                for out in shaper.event(event):
                    yield out
        except ResponseFailed as e:
            if not stream:
                raise
            for out in shaper.fail(client_error(e.failure)):
                yield out
            return
        for out in shaper.finish():
            yield out
    finally:
        await events.aclose()


async def start(
    call: Callable[[Any, str], Awaitable[StartedResponse]],
    req: Any,
    rid: str,
    metrics: Metrics,
    endpoint: str,
    label: str,
    params: dict[str, str] | None = None,
    admission: Admission | None = None,
) -> StartedResponse:
    """`call(req, rid)` (Frontend.chat or .completion), holding a place in
    `admission`'s queue until the first event; a request it refuses is counted
    and raised as an APIError in the client API's terms."""
    try:
        if admission is None:
            return await call(req, rid)
        with admission.queued():
            return await call(req, rid)
    except Overloaded as e:
        error = APIError(503, str(e), None, {"retry-after": str(e.retry_after)})
    except ModelNotFound as e:
        metrics.outcome(UNKNOWN_MODEL, endpoint, flag(req.stream), "404").inc()
        raise APIError(404, str(e), "model") from None
    except RequestError as e:
        error = from_request_error(e, params)
    except ResponseFailed as e:
        error = client_error(e.failure, params)
    metrics.outcome(label, endpoint, flag(req.stream), str(error.status)).inc()
    raise error


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


async def respond(
    request: Request,
    frontend: Frontend,
    metrics: Metrics,
    endpoint: str,
    req: Any,
    view: Callable[[StartedResponse, str], APIView],
    *,
    call: Callable[[Any, str], Awaitable[StartedResponse]] | None = None,
    params: dict[str, str] | None = None,
) -> Response:
    """`req` (a chat request, or a completions request with
    `call=frontend.completion`) started under the request's id, observed, then
    streamed in the view's framing or collected and folded."""
    rid = request_id(request)
    headers = {"x-request-id": rid}
    t0 = time.perf_counter()
    label = _model_label(frontend, req.model)
    admission = getattr(request.app.state, "admission", None)
    resp = await start(call or frontend.chat, req, rid, metrics, endpoint, label, params, admission)
    note_response(request, resp)
    headers.update(resp.headers)
    api = view(resp, rid)
    events = shaped(api.shaper, observed(resp, metrics, endpoint, req.stream, t0), req.stream)

    def gone() -> None:
        metrics.disconnected.labels(resp.model).inc()

    if req.stream:

        def failure() -> bytes:  # a bug broke the stream: the API's own ending
            return api.framing.tail(api.shaper.fail(APIError(500, INTERNAL_ERROR)))

        def shutdown() -> bytes:  # the server stops: the API's own ending, a 503
            return api.framing.tail(api.shaper.fail(APIError(503, SHUTTING_DOWN)))

        streams = getattr(request.app.state, "streams", None)
        return SSEResponse(api.framing.body(events), headers, gone, failure, streams, shutdown)
    try:
        body = api.fold(await collect(request, events, gone))
    except ClientGone:
        return Response(status_code=499)  # what a vanished client "gets": nginx's 499
    except ResponseFailed as e:
        error = client_error(e.failure, params)
        raise APIError(
            error.status, error.message, error.param, {**headers, **error.headers}
        ) from None
    return Response(orjson.dumps(body), media_type="application/json", headers=headers)


def _model_label(frontend: Frontend, name: str | None) -> str:
    try:
        return frontend.resolve(name).name
    except ModelNotFound:
        return UNKNOWN_MODEL
