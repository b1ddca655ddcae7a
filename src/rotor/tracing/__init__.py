"""Distributed tracing, off unless asked for: a span per request and per
stage (never per token), exported over OTLP/HTTP by OpenTelemetry's SDK.

Off (the default), every call here returns or acts on one shared no-op
`Span`, and OpenTelemetry's SDK is never imported. `--otlp-endpoint URL`, or the
standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
turns it on in the process that serves (`Exporting`, a pair of startup and
shutdown hooks; tracing/otel.py is loaded then). The span a request is in is
a context variable, set by the HTTP layer for the request's task, so the
routing and engine steps below find their parent without it being passed
down through the engine contract. A span's context crosses NATS as W3C
`traceparent` headers (`Span.headers`), with the request's `x-request-id`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from contextvars import ContextVar, Token
from typing import Any, ClassVar, Literal, Protocol

Kind = Literal["internal", "server", "client"]
REQUEST_ID = "x-request-id"  # the header that carries it, HTTP and NATS alike
TRACES_PATH = "/v1/traces"
SHUTDOWN_S = 3.0  # how long the last spans may take to leave at shutdown


class Span:
    """A span as rotor's code sees it. This base records nothing: it is what
    every call gets while tracing is off (tracing/otel.py records)."""

    __slots__ = ()
    recording: ClassVar[bool] = False

    def set(self, attributes: Mapping[str, Any]) -> None:
        """Attributes (None values are left out)."""

    def event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        """A timestamped event on the span (the first token, the first output)."""

    def fail(self, message: str, cause: str | None = None) -> None:
        """The span's work failed; the first failure's message is kept."""

    def end(self) -> None:
        """Over (a second call does nothing)."""

    def headers(self) -> dict[str, str] | None:
        """What a remote child needs: `traceparent` (and `x-request-id`); None when off."""
        return None

    def __enter__(self) -> Span:
        return self

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, Exception):
            self.fail(f"{type(exc).__name__}: {exc}")
        self.end()


NO_SPAN = Span()


class Tracer(Protocol):
    """What tracing on provides (tracing/otel.OtelTracer)."""

    def start(self, name: str, parent: Span, attributes: Mapping[str, Any], kind: Kind) -> Span: ...

    def remote(
        self,
        name: str,
        headers: Mapping[str, str],
        request_id: str,
        attributes: Mapping[str, Any],
        kind: Kind,
    ) -> Span: ...

    def shutdown(self, timeout_s: float) -> None: ...


_tracer: Tracer | None = None
_current: ContextVar[Span] = ContextVar("rotor_span", default=NO_SPAN)


def enabled() -> bool:
    return _tracer is not None


def start(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    kind: Kind = "internal",
    parent: Span | None = None,
) -> Span:
    """A span, child of `parent` (by default the span the caller's request
    is in; none: a root). Its request id is its parent's."""
    tracer = _tracer
    if tracer is None:
        return NO_SPAN
    return tracer.start(
        name, parent if parent is not None else _current.get(), attributes or {}, kind
    )


def remote(
    name: str,
    headers: Mapping[str, str] | None,
    attributes: Mapping[str, Any] | None = None,
    kind: Kind = "server",
    request_id: str | None = None,
) -> Span:
    """A span whose parent is in another process: the W3C `traceparent` in
    `headers` (an HTTP client's, a frontend's over NATS), or a root when
    there is none. The request id: `request_id`, else the headers' `x-request-id`."""
    tracer = _tracer
    if tracer is None:
        return NO_SPAN
    headers = headers or {}
    rid = request_id if request_id is not None else headers.get(REQUEST_ID, "")
    return tracer.remote(name, headers, rid, attributes or {}, kind)


def current() -> Span:
    """The span of the request the caller works for (NO_SPAN: none, or off)."""
    return _current.get()


def use(span: Span) -> Token[Span] | None:
    """`span` is the current one in this task (and the tasks it starts) until `reset`."""
    return _current.set(span) if span.recording else None


def reset(token: Token[Span] | None) -> None:
    if token is not None:
        _current.reset(token)


def traces_url(endpoint: str | None, env: Mapping[str, str] = os.environ) -> str | None:
    """Where spans go, or None: tracing off. `endpoint` (--otlp-endpoint) is
    a collector's base URL (`/v1/traces` is added unless it is there) and
    wins; else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the whole URL), else
    OTEL_EXPORTER_OTLP_ENDPOINT (a base URL). OTEL_SDK_DISABLED=true or
    OTEL_TRACES_EXPORTER=none keep it off whatever the rest says."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    if endpoint:
        return _with_path(endpoint)
    whole = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if whole:
        return whole
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return _with_path(base) if base else None


def _with_path(base: str) -> str:
    base = base.strip().rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def missing(endpoint: str | None) -> str | None:
    """Why tracing cannot start when it is asked for (the SDK is not
    installed), else None. Imports nothing when tracing is off."""
    if traces_url(endpoint) is None:
        return None
    from importlib.util import find_spec

    try:
        found = find_spec("opentelemetry.sdk") and find_spec(
            "opentelemetry.exporter.otlp.proto.http"
        )
    except ModuleNotFoundError:
        found = None
    if found:
        return None
    return "tracing needs OpenTelemetry's SDK and OTLP exporter: pip install 'rotor[otel]'"


class Exporting:
    """Tracing for one serving process: `start` and `stop` are its startup
    and shutdown hooks (run in the process that serves, so each of the
    --http-workers processes exports its own spans, after the fork).
    `service` names the process when OTEL_SERVICE_NAME does not."""

    def __init__(self, endpoint: str | None, service: str) -> None:
        self.endpoint = endpoint
        self.service = service

    async def start(self) -> None:
        global _tracer
        url = traces_url(self.endpoint)
        if url is None or _tracer is not None:
            return
        from rotor.tracing.otel import OtelTracer  # the SDK, loaded only now

        _tracer = OtelTracer(url, os.environ.get("OTEL_SERVICE_NAME") or self.service)

    async def stop(self) -> None:
        """The last spans sent (for at most SHUTDOWN_S, off the loop), then off."""
        global _tracer
        tracer, _tracer = _tracer, None
        if tracer is not None:
            await asyncio.to_thread(tracer.shutdown, SHUTDOWN_S)
