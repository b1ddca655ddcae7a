"""A real OTLP/HTTP trace receiver for tests, in the test process: a small
HTTP server on a free loopback port that takes `POST /v1/traces` with
protobuf bodies (what OpenTelemetry's exporter sends), decodes them with
opentelemetry-proto's ExportTraceServiceRequest and keeps every span."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

SERVER, CLIENT = 2, 3  # opentelemetry.proto.trace.v1.Span.SpanKind
STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.StatusCode


@dataclass
class ReceivedSpan:
    """One span as it arrived, ids in hex (parent "" for a root)."""

    service: str
    pid: int | None
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    status: int
    status_message: str
    events: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status == STATUS_ERROR


class Receiver:
    """The spans received so far (thread-safe), and how many posts brought them."""

    def __init__(self, url: str) -> None:
        self.url = url  # the collector's base URL: what --otlp-endpoint takes
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self.posts = 0

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = list(_spans(request))
        with self._lock:
            self.posts += 1
            self._spans.extend(spans)

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def of_request(self, request_id: str) -> list[ReceivedSpan]:
        """The spans whose `rotor.request_id` is `request_id`."""
        return [s for s in self.spans() if s.attributes.get("rotor.request_id") == request_id]

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans() if s.trace_id == trace_id]


def _spans(request: ExportTraceServiceRequest) -> Iterator[ReceivedSpan]:
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    service=str(resource.get("service.name", "")),
                    pid=resource.get("process.pid"),
                    name=span.name,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    kind=span.kind,
                    attributes=_attributes(span.attributes),
                    status=span.status.code,
                    status_message=span.status.message,
                    events=[e.name for e in span.events],
                )


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


class _Handler(BaseHTTPRequestHandler):
    receiver: Receiver  # set on the class made per server

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        try:
            self.receiver.add(body)
        except Exception:  # not an ExportTraceServiceRequest: what a collector says
            self.send_error(400)
            return
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver on 127.0.0.1 (a port the kernel picks), for the block's length."""
    handler = type("Handler", (_Handler,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    receiver = Receiver(f"http://127.0.0.1:{server.server_address[1]}")
    handler.receiver = receiver
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
