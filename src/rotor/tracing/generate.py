"""The generate span: one engine request as the engine serves it, on a
worker (`rotor worker`) or in-process (`rotor run`).

What the engine contract lets one know, and so what the span says: the
request (prompt tokens, max_tokens, its stage: a whole request, a prefill
for a decode worker, a decode after one; tokens already made when it was
resumed), the engine's queue when it arrived (waiting and running
sequences), the time to its first output (queue and prefill together: the
contract does not say when a request was first scheduled), the time from
there to its last output (decode), its output tokens, cached prompt tokens,
finish and failure. The figures are taken by a layer over the output stream
(`follow`, `Followed`) that exists only while tracing is on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from rotor import tracing
from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    RESUME_FROM,
    EngineClient,
    EngineError,
    EngineOutput,
    EngineRequest,
    EngineState,
    EngineStream,
    tokens_of,
)
from rotor.protocol.flow import Sink
from rotor.tracing import NO_SPAN, Span

NAME = "rotor.generate"


def stage(request: EngineRequest) -> str:
    """`prefill` (only the prompt, for a decode worker), `decode` (after a
    remote prefill) or `agg` (the whole request)."""
    annotations = request.annotations
    if annotations.get(PREFILL_ONLY):
        return "prefill"
    return "decode" if KV_TRANSFER in annotations else "agg"


def attributes(request: EngineRequest, engine: EngineClient) -> dict[str, Any]:
    state = engine.state()
    return {
        "rotor.engine_request_id": request.request_id,
        "rotor.stage": stage(request),
        "gen_ai.usage.input_tokens": len(request.token_ids),
        "gen_ai.request.max_tokens": request.stop.max_tokens,
        "rotor.resume_from": request.annotations.get(RESUME_FROM),
        "rotor.engine.waiting": state.waiting,
        "rotor.engine.running": state.running,
    }


def remote_span(
    request: EngineRequest,
    engine: EngineClient,
    headers: Mapping[str, str] | None,
    extra: Mapping[str, Any],
) -> Span:
    """A worker's generate span, the child of the frontend's attempt whose
    context `headers` (the NATS message's) carry."""
    if not tracing.enabled():
        return NO_SPAN
    return tracing.remote(NAME, headers, {**attributes(request, engine), **extra})


def follow(span: Span, stream: EngineStream) -> EngineStream:
    """`stream`, its figures recorded on `span` (ended by its owner); while
    tracing is off, `stream` itself: no layer for any token to cross."""
    if not span.recording:
        return stream
    return Followed(lambda: span, lambda: stream, own=False)


class Followed:
    """The one layer over an engine stream that records its figures on a
    span (a Sink of the stream, a Source for its reader): the span (ended
    here when `own`) and the stream are opened when first subscribed, in
    the subscriber's context."""

    __slots__ = (
        "_open_span",
        "_open_stream",
        "_own",
        "_span",
        "_stream",
        "_sink",
        "_t0",
        "_first",
        "_last",
        "_tokens",
        "_cached",
        "_finish",
        "_over",
    )

    def __init__(
        self,
        open_span: Callable[[], Span],
        open_stream: Callable[[], EngineStream],
        own: bool,
    ) -> None:
        self._open_span, self._open_stream, self._own = open_span, open_stream, own
        self._span: Span = NO_SPAN
        self._stream: EngineStream | None = None
        self._sink: Sink[EngineOutput] | None = None
        self._t0 = self._first = self._last = 0.0
        self._tokens = 0
        self._cached: int | None = None
        self._finish: str | None = None
        self._over = False

    # -- Source[EngineOutput] ---------------------------------------------------------

    def subscribe(self, sink: Sink[EngineOutput]) -> None:
        self._sink = sink
        if self._stream is None:
            self._span = self._open_span()
            self._t0 = time.perf_counter()
            self._stream = self._open_stream()
            self._stream.subscribe(self)

    def resume(self) -> None:
        if self._stream is not None:
            self._stream.resume()

    def stop(self) -> None:
        self._sink = None
        if self._stream is not None:
            self._stream.stop()
        self._done()

    # -- Sink[EngineOutput] -------------------------------------------------------------

    def put(self, item: EngineOutput) -> bool:
        self._last = time.perf_counter()
        if not self._first:
            self._first = self._last
            self._cached = item.cached_tokens
            self._span.event("first_output")
        self._tokens += tokens_of(item)
        if item.finish is not None:
            self._finish = item.finish
        sink = self._sink
        return sink.put(item) if sink is not None else False

    def end(self, error: Exception | None) -> None:
        if isinstance(error, EngineError):
            self._span.fail(error.message, error.cause)
        elif error is not None:
            self._span.fail(f"{type(error).__name__}: {error}")
        sink, self._sink = self._sink, None
        self._done()
        if sink is not None:
            sink.end(error)

    def _done(self) -> None:
        """Once: the figures on the span (which ends here when it is ours)."""
        if self._over:
            return
        self._over = True
        first, last = self._first, self._last
        span = self._span
        span.set(
            {
                "gen_ai.usage.output_tokens": self._tokens,
                "rotor.cached_tokens": self._cached,
                "rotor.finish_reason": self._finish,
                "rotor.queue_prefill_ms": _ms(first - self._t0) if first else None,
                "rotor.decode_ms": _ms(last - first) if first else None,
            }
        )
        if self._own:
            span.end()


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


class Traced:
    """An in-process engine whose every request is a generate span, the
    child of the request's span (`rotor run`; a pool's workers make their own)."""

    def __init__(self, engine: EngineClient) -> None:
        self.engine = engine

    def generate(self, request: EngineRequest) -> EngineStream:
        engine = self.engine
        return Followed(
            lambda: tracing.start(NAME, attributes(request, engine)),
            lambda: engine.generate(request),
            own=True,
        )

    def state(self) -> EngineState:
        return self.engine.state()


def traced(engine: EngineClient) -> EngineClient:
    """`engine` with generate spans while tracing is on; itself when off."""
    return Traced(engine) if tracing.enabled() else engine
