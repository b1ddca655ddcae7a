"""A response's metrics around its event stream: in flight, time to first
token and inter-token latency (timed when an event brings generated pieces:
the moment a token reached the frontend, streaming or not), outcome, tokens,
duration. Label values are lowercase (`stream="true"`), as Prometheus users expect."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

from rotor.api.metrics import Metrics
from rotor.frontend import Response
from rotor.pipeline.events import ChoiceEvent


def flag(value: bool) -> str:
    """A boolean label value, lowercase as Prometheus users expect."""
    return "true" if value else "false"


async def observed(
    resp: Response, metrics: Metrics, endpoint: str, stream: bool, t0: float
) -> AsyncGenerator[ChoiceEvent, None]:
    model = resp.model
    metrics.in_flight.labels(model).inc()
    perf = time.perf_counter
    ttft, itl = metrics.ttft.labels(model), metrics.itl.labels(model)
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
        metrics.in_flight.labels(model).dec()
        metrics.requests.labels(model, endpoint, flag(stream), status).inc()
        metrics.prompt_tokens.labels(model).inc(resp.prompt_tokens)
        metrics.completion_tokens.labels(model).inc(resp.completion_tokens())
        metrics.duration.labels(model).observe(perf() - t0)
