"""A response's metrics around its event stream: in flight, time to first
token and inter-token latency (timed when an event brings generated pieces:
the moment a token reached the frontend, streaming or not), outcome, tokens,
duration. Label values are lowercase (`stream="true"`), as Prometheus users expect.

With a request log, the same moments go into the request's `StreamTiming`
too: the inter-token observer is then one that also keeps the gap, chosen
once per response, so a response without a log runs the very same per-event
code as before."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable

from rotor import tracing
from rotor.api.access_state import StreamTiming
from rotor.api.metrics import Metrics
from rotor.api.request_span import first_token
from rotor.frontend import StartedResponse
from rotor.pipeline.events import ChoiceEvent


def flag(value: bool) -> str:
    """A boolean label value, lowercase as Prometheus users expect."""
    return "true" if value else "false"


async def observed(
    resp: StartedResponse,
    metrics: Metrics,
    endpoint: str,
    stream: bool,
    t0: float,
    timing: StreamTiming | None = None,
) -> AsyncGenerator[ChoiceEvent, None]:
    model = resp.served.name  # aliases count as their model
    series = metrics.series(model)
    series.in_flight.inc()
    perf = time.perf_counter
    ttft = series.ttft
    observe_gap = series.itl.observe if timing is None else _kept(series.itl.observe, timing)
    last = first = 0.0
    status = "200"
    answers = metrics.answers  # rotor frontend: what the planner reads (api/answers.py)
    if answers is not None:
        answers.begin(model)
    span = tracing.current()  # the request's span (tracing on), told of the first token
    try:
        async for event in resp.events:
            if event.pieces:
                now = perf()
                if last:
                    observe_gap(now - last)
                else:
                    ttft.observe(now - t0)
                    first_token(span, now - t0)
                    first = now
                    if timing is not None:
                        timing.first = now
                last = now
            yield event
    except Exception as e:  # ResponseFailed, or a bug
        status = "500"
        span.fail(f"the response failed after it began: {e}")
        raise
    except BaseException:  # the client went away (cancelled, or the stream was closed)
        status = "cancelled"
        raise
    finally:
        await resp.events.aclose()
        series.in_flight.dec()
        metrics.outcome(model, endpoint, flag(stream), status).inc()
        usage = resp.usage
        series.prompt_tokens.inc(usage.prompt_tokens)
        series.completion_tokens.inc(usage.completion_tokens)
        series.duration.observe(perf() - t0)
        if answers is not None:
            n = usage.completion_tokens
            answers.end(
                model,
                first - t0 if first else None,
                (last - first) / (n - 1) if first and n > 1 else None,
                usage.prompt_tokens,
                n,
            )


def _kept(observe: Callable[[float], None], timing: StreamTiming) -> Callable[[float], None]:
    """`observe`, which also keeps each gap for the request log."""
    keep = timing.gaps.append

    def both(gap: float) -> None:
        observe(gap)
        keep(gap)

    return both
