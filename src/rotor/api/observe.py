"""A response's metrics around its event stream: in flight, time to first
token and inter-token latency (timed when an event brings generated pieces:
the moment a token reached the frontend, streaming or not), outcome, tokens,
duration. Label values are lowercase (`stream="true"`), as Prometheus users expect."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

from rotor.api.metrics import Metrics
from rotor.frontend import StartedResponse
from rotor.pipeline.events import ChoiceEvent


def flag(value: bool) -> str:
    """A boolean label value, lowercase as Prometheus users expect."""
    return "true" if value else "false"


async def observed(
    resp: StartedResponse, metrics: Metrics, endpoint: str, stream: bool, t0: float
) -> AsyncGenerator[ChoiceEvent, None]:
    model = resp.model
    series = metrics.series(model)
    series.in_flight.inc()
    perf = time.perf_counter
    ttft, itl = series.ttft, series.itl
    last = 0.0
    status = "200"
    try:
        async for event in resp.events:
            if event.pieces:
                now = perf()
                if last:
                    itl.observe(now - last)
                else:
                    ttft.observe(now - t0)
                last = now
            yield event
    except Exception:  # ResponseFailed, or a bug
        status = "500"
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
