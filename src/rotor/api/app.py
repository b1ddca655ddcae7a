"""The ASGI app: every API's routes on one frontend, one error handling, auth.

Routes parse and validate; the frontend runs the request; `respond` turns
the result into HTTP. Errors leave in the envelope of the API the request
belongs to (`errors.is_anthropic`), whoever raised them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rotor import __version__
from rotor.api.access_log import AccessLog
from rotor.api.admission import DEFAULT_MAX_QUEUED, DEFAULT_MAX_WAITING, Admission
from rotor.api.answers import Answers
from rotor.api.anthropic import register_anthropic
from rotor.api.auth import APIKeyMiddleware
from rotor.api.bare_route import BareRoute
from rotor.api.body import DEFAULT_BODY_LIMIT, request_id
from rotor.api.docs import register_docs
from rotor.api.drain import OpenStreams
from rotor.api.errors import (
    INTERNAL_ERROR,
    REFUSALS,
    APIError,
    api_error,
    error_response,
    is_anthropic,
)
from rotor.api.kserve import KServeOptions
from rotor.api.lora import LoraControl, register_lora
from rotor.api.metrics import Metrics
from rotor.api.openai.embeddings import register_embeddings
from rotor.api.openai.routes import register_openai
from rotor.api.openai.scores import register_scores
from rotor.api.openapi import install as install_openapi
from rotor.api.ops import register_ops
from rotor.api.page import register_page
from rotor.api.request_log import RequestLog
from rotor.api.respond import Responder
from rotor.api.responses import register_responses
from rotor.api.responses.store import MemoryStore, ResponseStore
from rotor.api.sse import SERVER_SEND
from rotor.api.tokens import register_tokens
from rotor.frontend import Frontend

log = logging.getLogger("rotor.api")

Hook = Callable[[], Awaitable[None]]


def create_app(
    frontend: Frontend,
    api_key: str | Sequence[str] | None = None,
    body_limit: int = DEFAULT_BODY_LIMIT,
    on_startup: list[Hook] | None = None,
    on_shutdown: list[Hook] | None = None,
    max_queued: int = DEFAULT_MAX_QUEUED,
    max_waiting: int = DEFAULT_MAX_WAITING,
    request_log: RequestLog | None = None,
    answers: Answers | None = None,
    loras: LoraControl | None = None,
    kserve: KServeOptions | None = None,
    overload_status: int = 503,
    response_store: ResponseStore | None = None,
) -> FastAPI:
    """`on_startup` / `on_shutdown`: what the builder starts and stops with the
    server (in-process engines, a NATS connection); the frontend is ready once
    startup ran. Startup stops where it is when the server is told to leave
    (`app.state.leaving`, set on SIGTERM: a NATS that never answers must not
    keep the process up), and the shutdown hooks run either way.
    `max_queued`: requests waiting for their first token beyond which a new
    one waits in the frontend's line, by priority, or with `max_waiting`
    already waiting there is a 503 (admission control). `request_log`: where each generating
    request's record goes (its writer runs while the server does).
    `answers`: where each response's figures go for the planner (rotor frontend).
    `loras`: the engine `/v1/loras` loads adapters into (rotor run).
    `kserve` (`--grpc-port`): the KServe gRPC server over the same responder
    (`app.state.kserve`; serve/http.py starts it once HTTP listens), stopped
    before the shutdown hooks. `overload_status` (`--overload-status`): the
    status of a request refused because every worker is overloaded (503 or
    529). `response_store`: where the Responses API keeps responses (None:
    this process's memory); whoever gives one closes it (an `on_shutdown`
    hook: those run once the background responses have ended)."""
    leaving = asyncio.Event()
    stop_first: list[Hook] = []  # what serves requests stops before what answers them

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if request_log is not None:
            request_log.start()
        frontend.ready = await _start(on_startup or (), leaving)
        try:
            yield
        finally:
            frontend.ready = False
            try:
                for hook in (*stop_first, *(on_shutdown or ())):
                    await hook()
            finally:
                if request_log is not None:  # what is queued is written, a .gz closed whole
                    await asyncio.to_thread(request_log.close)

    app = _App(
        title="rotor",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        **_NO_NATIVE_TELEMETRY,
    )
    app.router.route_class = BareRoute  # every route registered below
    registry = frontend.registry
    admission = Admission(max_queued, max_waiting)
    metrics = Metrics(
        lambda: [(e.model.name, e.engine.state()) for e in registry.entries()],
        lambda: [(e.model.name, e.remote) for e in registry.entries() if e.remote is not None],
        admission,
        answers,
        lambda: frontend.images.counts,
    )
    streams = OpenStreams()
    app.state.leaving = leaving
    app.state.frontend = frontend
    app.state.admission = admission
    app.state.streams = streams
    app.state.metrics = metrics
    _register_errors(app, metrics)
    if api_key is not None:  # "" is refused by the middleware: never auth silently off
        app.add_middleware(APIKeyMiddleware, api_key=api_key)
    responder = Responder(frontend, metrics, admission, streams, overload_status)
    app.state.kserve = None
    if kserve is not None:  # grpc is imported only now
        from rotor.api.kserve.server import KServeServer

        app.state.kserve = KServeServer(responder, kserve, api_key, leaving, body_limit)
        stop_first.append(app.state.kserve.stop)
    register_openai(app, responder, body_limit)
    register_embeddings(app, responder, body_limit)
    register_scores(app, responder, body_limit)
    register_anthropic(app, responder, body_limit)
    store = response_store if response_store is not None else MemoryStore()
    stop_first.append(register_responses(app, responder, body_limit, store))
    register_tokens(app, frontend, body_limit)
    register_ops(app, frontend, metrics)
    if loras is not None:
        register_lora(app, loras)
    register_docs(app)
    install_openapi(app, api_key)
    register_page(app)
    if request_log is not None:
        metrics.registry.register(request_log.collector())
    app.add_middleware(AccessLog, request_log=request_log)  # last added: outermost, sees all
    return app


async def _start(hooks: Iterable[Hook], leaving: asyncio.Event) -> bool:
    """Run the startup hooks in order, unless `leaving` is set first: then
    the hook under way is cancelled (False: the server did not start)."""

    async def run_all() -> None:
        for hook in hooks:
            await hook()

    work = asyncio.ensure_future(run_all())
    told = asyncio.ensure_future(leaving.wait())
    try:
        await asyncio.wait({work, told}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        told.cancel()
    if work.done():
        work.result()  # a hook that failed fails the startup
        return True
    work.cancel()
    await asyncio.gather(work, return_exceptions=True)
    log.warning("told to stop while starting: stopped before serving")
    return False


def _register_errors(app: FastAPI, metrics: Metrics) -> None:
    def envelope(request: Request) -> bool:
        return is_anthropic(request.url.path, request.scope["headers"])

    async def _api_error(request: Request, exc: Exception) -> Response:
        error = api_error(exc)
        headers = {"x-request-id": request_id(request), **error.headers}
        return error_response(error.status, error.message, error.param, headers, envelope(request))

    # What the frontend raises for a request it will not serve becomes its
    # status in one place (api_error), whichever route let it through.
    for kind in (APIError, *REFUSALS):
        app.add_exception_handler(kind, _api_error)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return error_response(exc.status_code, message, None, exc.headers, envelope(request))

    @app.exception_handler(ClientDisconnect)
    async def _body_aborted(request: Request, exc: ClientDisconnect) -> Response:
        # Nobody is left to answer: one line and a counter, not a traceback.
        metrics.body_aborted.inc()
        log.warning(
            "client disconnected while sending the body of %s %s",
            request.method,
            request.url.path,
        )
        return Response(status_code=499)

    app.add_middleware(_CatchAll)


# FastAPI 0.165 and later make OpenTelemetry spans, metrics and logs of every request
# of their own once a provider is configured (rotor's tracing configures one): rotor
# makes its request span itself (api/request_span.py) and its metrics (/metrics), so
# FastAPI's are off; older FastAPIs take no such argument.
_NO_NATIVE_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


class _App(FastAPI):
    """FastAPI that leaves the server's own `send` in the scope, for the
    middle writes of a stream (api/sse.py)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        # The server's send is bound to its request cycle, which holds this
        # scope: taken out again at the end, or the cycle keeps the request's
        # whole graph alive until a garbage collection (a gen-2 one, by then).
        scope[SERVER_SEND] = send
        try:
            await super().__call__(scope, receive, send)
        finally:
            del scope[SERVER_SEND]


class _CatchAll:
    """A bug below becomes a JSON 500 in the route's envelope, logged once,
    and the connection stays open (Starlette's own last-resort handler
    re-raises, which makes the server drop the keep-alive connection)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            log.error("unhandled error on %s %s", scope["method"], scope["path"], exc_info=exc)
            if started:
                raise
            anthropic = is_anthropic(scope["path"], scope["headers"])
            response = error_response(500, INTERNAL_ERROR, None, None, anthropic)
            await response(scope, receive, send)
