"""The route body every generating API shares (`Responder.respond`): look the
model up once, start the response on the frontend (under admission
control), then stream the API's shaped events in its SSE framing, or collect
the internal events and build the API's body from them. Both read the same
internal events; a non-streaming body is never made by folding the chunks a
stream would have sent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import orjson
from fastapi import Request
from starlette.responses import Response

from rotor.api.access_state import note_response, timing_of
from rotor.api.admission import Admission
from rotor.api.body import apply_session, request_id
from rotor.api.drain import SHUTTING_DOWN, OpenStreams
from rotor.api.errors import INTERNAL_ERROR, REFUSALS, APIError, api_error
from rotor.api.metrics import Metrics
from rotor.api.observe import Observation, flag, observed
from rotor.api.sse import Framing, race_disconnect
from rotor.api.sse_response import SSEResponse
from rotor.api.streamed import ShapedStream, Shaping
from rotor.frontend import Frontend, ModelEntry, ModelNotFound, StartedResponse
from rotor.pipeline.collected import Collected, collect
from rotor.pipeline.events import ChoiceEvent, ResponseFailed
from rotor.pipeline.params import check_priority

# The `model` label of requests for a model that is not served: clients choose
# that name, so it must not become a label value (one time series per typo).
UNKNOWN_MODEL = "unknown"

Begin = Callable[[ModelEntry, Any, str], Awaitable[StartedResponse]]


class EventShaper(Protocol):
    """An API's view of one streamed response: its own events for the internal ones."""

    def start(self) -> list[dict[str, Any]]: ...

    def event(self, event: ChoiceEvent) -> list[dict[str, Any]]: ...

    def frames(self, event: ChoiceEvent) -> bytes | None:
        """The event's SSE bytes when the shaper writes them itself (a common
        event it keeps a ready-made template for: the same bytes its
        framing would make of `event(event)`), else None."""
        ...

    def fail(self, error: APIError) -> list[dict[str, Any]]:
        """The events that end a stream that failed after it began."""
        ...

    def finish(self) -> list[dict[str, Any]]: ...


@dataclass
class APIView:
    """How one API presents one response: streamed, its shaper and SSE
    framing; not streamed, the body built from the collected choices."""

    shaper: Callable[[], EventShaper]
    framing: Framing
    body: Callable[[list[Collected]], dict[str, Any]]
    # streamed, told once the stream is over: its last bytes went (True), or not
    finished: Callable[[bool], None] | None = None


class ClientGone(Exception):
    """The client disconnected before its response was ready (before its
    first event, or, not streaming, before its last)."""


class Responder:
    """What the generating routes of one app share: the frontend, the
    metrics, admission control, the open streams, and the status of a
    request every worker is too loaded for (`--overload-status`)."""

    def __init__(
        self,
        frontend: Frontend,
        metrics: Metrics,
        admission: Admission,
        streams: OpenStreams,
        overload_status: int = 503,
    ) -> None:
        self.frontend = frontend
        self.metrics = metrics
        self.admission = admission
        self.streams = streams
        self.overload_status = overload_status

    async def respond(
        self,
        request: Request,
        endpoint: str,
        req: Any,
        view: Callable[[StartedResponse, str], APIView],
        begin: Begin | None = None,
        params: dict[str, str] | None = None,
        entry: ModelEntry | None = None,
    ) -> Response:
        """`req` (a chat request, or with `begin=frontend.completion` a
        completions request) started under the request's id, observed, then
        streamed or collected. `params` renames the fields a 400 names to
        the client API's. `entry`: its model, when the route looked it up
        already (`lookup`)."""
        rid = request_id(request)
        t0 = time.perf_counter()
        apply_session(request, req)
        try:
            resp = await self.start(
                begin or self.frontend.chat, req, rid, endpoint, params, request.receive, entry
            )
        except ClientGone:
            return Response(status_code=499)  # what a vanished client "gets": nginx's 499
        note_response(request, resp)
        headers = {"x-request-id": rid, **resp.headers}
        api = view(resp, rid)
        timing = timing_of(request)
        if req.stream:
            watch = partial(Observation, resp, self.metrics, endpoint, True, t0, timing)
            return self._stream(api, resp, watch, headers)
        events = observed(resp, self.metrics, endpoint, False, t0, timing)
        try:
            choices = await self._collect(request, events, resp)
        except ClientGone:
            return Response(status_code=499)  # what a vanished client "gets": nginx's 499
        except ResponseFailed as e:
            error = api_error(e, params, self.overload_status)
            raise APIError(
                error.status, error.message, error.param, {**headers, **error.headers}
            ) from None
        body = api.body(choices)
        return Response(orjson.dumps(body), media_type="application/json", headers=headers)

    async def start(
        self,
        begin: Begin,
        req: Any,
        rid: str,
        endpoint: str,
        params: dict[str, str] | None = None,
        receive: Callable[[], Awaitable[Any]] | None = None,
        entry: ModelEntry | None = None,
    ) -> StartedResponse:
        """The model looked up (once) and the response begun, holding a place
        in the admission queue until its first event; a refusal is counted
        and raised as the client API's error. A client that leaves before
        the first event (in the frontend's line, in a long queue, a long
        prefill, a KV handover) leaves the line and stops the engines' work
        at once: over HTTP (`receive`) that is ClientGone;
        without `receive` (gRPC) the caller's task is cancelled, which
        cancels the start the same way. `entry`: the model, when the caller
        looked it up already (`lookup`)."""
        label = UNKNOWN_MODEL
        try:
            if entry is None:
                entry = self.frontend.model(req.model)
            label = entry.model.name
            # a priority the engine would ignore is a 400 now, not after a wait in line
            check_priority(entry.model, req.priority)
            admitted = self._admitted(begin, entry, req, rid)
            if receive is None:
                try:
                    return await admitted
                except asyncio.CancelledError:
                    self.metrics.disconnected.labels(label).inc()
                    raise
            started = await race_disconnect(admitted, receive)
            if started is None:
                self.metrics.disconnected.labels(label).inc()
                raise ClientGone
            return started.result()
        except REFUSALS as e:
            error = api_error(e, params, self.overload_status)
            status = "404" if isinstance(e, ModelNotFound) else str(error.status)
        self.metrics.outcome(label, endpoint, flag(req.stream), status).inc()
        raise error

    async def _admitted(
        self, begin: Begin, entry: ModelEntry, req: Any, rid: str
    ) -> StartedResponse:
        """The response begun once it has a place in the admission queue
        (waiting in line for one, by its priority, when all are taken),
        holding the place until its first event."""
        async with self.admission.queued(req.priority):
            return await begin(entry, req, rid)

    def lookup(self, req: Any, endpoint: str) -> ModelEntry:
        """The model `req` names, for a route that needs it before it
        starts the response (then given to `respond` or `start`, so that it
        is looked up once); an unknown one is counted as `start` counts it
        and raised as its 404."""
        try:
            return self.frontend.model(req.model)
        except ModelNotFound as e:
            self.metrics.outcome(UNKNOWN_MODEL, endpoint, flag(req.stream), "404").inc()
            raise api_error(e, None, self.overload_status) from None

    def _stream(
        self,
        api: APIView,
        resp: StartedResponse,
        watch: Callable[[], Observation],
        headers: dict[str, str],
    ) -> SSEResponse:
        shaper = api.shaper()
        framing = api.framing
        model = resp.served.name
        shaping = Shaping(watch, shaper, framing)

        def failure() -> bytes:  # a bug broke the stream: the API's own ending
            return framing.tail(shaper.fail(APIError(500, INTERNAL_ERROR)))

        def shutdown() -> bytes:  # the server stops: the API's own ending, a 503
            return framing.tail(shaper.fail(APIError(503, SHUTTING_DOWN)))

        def gone() -> None:
            self.metrics.disconnected.labels(model).inc()

        shaped = ShapedStream(shaping, resp.events)
        finish: Callable[[bool], None] = shaped.finish
        if api.finished is not None:
            finish = partial(_both, shaped.finish, api.finished)
        return SSEResponse(
            shaped,
            headers,
            gone,
            failure,
            self.streams,
            shutdown,
            framing.keepalive,
            finish,
        )

    async def _collect(
        self, request: Request, events: AsyncGenerator[ChoiceEvent, None], resp: StartedResponse
    ) -> list[Collected]:
        """Every choice, collected — unless the client goes away first: then
        the work is cancelled at once (closing the pipeline aborts the
        engine) and ClientGone is raised. Non-streaming responses need this
        as much as streams do."""
        try:
            work = await race_disconnect(collect(events, resp.n), request.receive)
        finally:
            await events.aclose()
        if work is None:
            self.metrics.disconnected.labels(resp.served.name).inc()
            raise ClientGone
        return work.result()


def _both(first: Callable[[bool], None], then: Callable[[bool], None], complete: bool) -> None:
    first(complete)
    then(complete)
