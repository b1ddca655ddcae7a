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
(`follow`) that exists only while tracing is on.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from rotor import tracing
from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    RESUME_FROM,
    EngineError,
    EngineOutput,
    EngineRequest,
    EngineState,
)
from rotor.tracing import NO_SPAN, Span

NAME = "rotor.generate"


class Engine(Protocol):
    def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]: ...

    def state(self) -> EngineState: ...


def stage(request: EngineRequest) -> str:
    """`prefill` (only the prompt, for a decode worker), `decode` (after a
    remote prefill) or `agg` (the whole request)."""
    annotations = request.annotations
    if annotations.get(PREFILL_ONLY):
        return "prefill"
    return "decode" if KV_TRANSFER in annotations else "agg"


def attributes(request: EngineRequest, engine: Engine) -> dict[str, Any]:
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
    engine: Engine,
    headers: Mapping[str, str] | None,
    extra: Mapping[str, Any],
) -> Span:
    """A worker's generate span, the child of the frontend's attempt whose
    context `headers` (the NATS message's) carry."""
    if not tracing.enabled():
        return NO_SPAN
    return tracing.remote(NAME, headers, {**attributes(request, engine), **extra})


def follow(span: Span, stream: AsyncIterator[EngineOutput]) -> AsyncIterator[EngineOutput]:
    """`stream`, its figures recorded on `span` (ended by its owner); while
    tracing is off, `stream` itself: no layer for any token to cross."""
    if not span.recording:
        return stream
    return _followed(lambda: span, lambda: stream, own=False)


async def _followed(
    open_span: Callable[[], Span],
    open_stream: Callable[[], AsyncIterator[EngineOutput]],
    own: bool,
) -> AsyncGenerator[EngineOutput, None]:
    """The one layer over the outputs: the span (ended here when `own`) and
    the stream are opened on the first read, in the reader's context."""
    span = open_span()
    stream = open_stream()
    perf = time.perf_counter
    t0 = perf()
    first = last = 0.0
    tokens = 0
    cached: int | None = None
    finish: str | None = None
    try:
        async for out in stream:
            last = perf()
            if not first:
                first = last
                cached = out.cached_tokens
                span.event("first_output")
            tokens += len(out.token_ids) if out.token_ids else int(out.text is not None)
            if out.finish is not None:
                finish = out.finish
            yield out
    except EngineError as e:
        span.fail(e.message, e.cause)
        raise
    except Exception as e:
        span.fail(f"{type(e).__name__}: {e}")
        raise
    finally:
        span.set(
            {
                "gen_ai.usage.output_tokens": tokens,
                "rotor.cached_tokens": cached,
                "rotor.finish_reason": finish,
                "rotor.queue_prefill_ms": _ms(first - t0) if first else None,
                "rotor.decode_ms": _ms(last - first) if first else None,
            }
        )
        try:
            await stream.aclose()  # type: ignore[attr-defined]
        finally:
            if own:
                span.end()


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


class Traced:
    """An in-process engine whose every request is a generate span, the
    child of the request's span (`rotor run`; a pool's workers make their own)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        engine = self.engine
        return _followed(
            lambda: tracing.start(NAME, attributes(request, engine)),
            lambda: engine.generate(request),
            own=True,
        )


def traced(engine: Any) -> Any:
    """`engine` with generate spans while tracing is on; itself when off."""
    return Traced(engine) if tracing.enabled() else engine
