"""Tracing on: rotor's spans as OpenTelemetry SDK spans, exported in batches
over OTLP/HTTP (protobuf) by the SDK's own thread, never on the event loop.

Imported only when tracing is on (rotor.tracing.Exporting). A collector
that is down costs the exporter thread its retries and the spans it drops,
never a request its time: ending a span only puts it on the batch queue.
The batch processor reads the standard OTEL_BSP_* variables, the sampler
OTEL_TRACES_SAMPLER (a client's sampled flag is honoured by default), the
resource OTEL_RESOURCE_ATTRIBUTES.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from rotor import __version__
from rotor.tracing import REQUEST_ID, Kind, Span

REQUEST_ID_ATTRIBUTE = "rotor.request_id"
_KINDS = {"internal": SpanKind.INTERNAL, "server": SpanKind.SERVER, "client": SpanKind.CLIENT}
_PROPAGATOR = TraceContextTextMapPropagator()


class OtelSpan(Span):
    """One SDK span and the request id its children inherit. Calls after
    `end` do nothing (the SDK would warn about each)."""

    __slots__ = ("_span", "request_id", "_open", "_failed")
    recording = True

    def __init__(self, span: trace.Span, request_id: str) -> None:
        self._span = span
        self.request_id = request_id
        self._open = True
        self._failed = False

    def set(self, attributes: Mapping[str, Any]) -> None:
        if self._open:
            self._span.set_attributes(_present(attributes))

    def event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        if self._open:
            self._span.add_event(name, _present(attributes or {}))

    def fail(self, message: str, cause: str | None = None) -> None:
        if self._open and not self._failed:
            self._failed = True
            self._span.set_status(Status(StatusCode.ERROR, message))
            if cause:
                self._span.set_attribute("rotor.error.cause", cause)

    def end(self) -> None:
        if self._open:
            self._open = False
            self._span.end()

    def headers(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, trace.set_span_in_context(self._span))
        if self.request_id:
            carrier[REQUEST_ID] = self.request_id
        return carrier

    def context(self) -> Context:
        return trace.set_span_in_context(self._span)


class OtelTracer:
    """A TracerProvider of this process's own, with one batch processor
    exporting to `url`."""

    def __init__(self, url: str, service: str) -> None:
        resource = Resource.create(
            {"service.name": service, "service.version": __version__, "process.pid": os.getpid()}
        )
        # as the SDK's interface, which is typed (the OTLP exporter's own methods are not)
        self._exporter: SpanExporter = OTLPSpanExporter(endpoint=url)
        self._provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self._provider.add_span_processor(BatchSpanProcessor(self._exporter))
        self._tracer = self._provider.get_tracer("rotor", __version__)

    def start(self, name: str, parent: Span, attributes: Mapping[str, Any], kind: Kind) -> Span:
        if isinstance(parent, OtelSpan):
            return self._open(name, parent.context(), parent.request_id, attributes, kind)
        return self._open(name, Context(), "", attributes, kind)

    def remote(
        self,
        name: str,
        headers: Mapping[str, str],
        request_id: str,
        attributes: Mapping[str, Any],
        kind: Kind,
    ) -> Span:
        parent = _PROPAGATOR.extract(headers, context=Context())
        return self._open(name, parent, request_id, attributes, kind)

    def _open(
        self, name: str, parent: Context, rid: str, attributes: Mapping[str, Any], kind: Kind
    ) -> OtelSpan:
        attrs = _present(attributes)
        if rid:
            attrs[REQUEST_ID_ATTRIBUTE] = rid
        span = self._tracer.start_span(name, context=parent, kind=_KINDS[kind], attributes=attrs)
        return OtelSpan(span, rid)

    def shutdown(self, timeout_s: float) -> None:
        """Export what is queued, for at most `timeout_s`; a collector still
        not answering then is given up on (the exporter's retries stop)."""
        worker = threading.Thread(target=self._provider.shutdown, daemon=True)
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            self._exporter.shutdown()


def _present(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}
