"""A response's metrics around its event stream: in flight, time to first
token and inter-token latency (timed when an event brings generated pieces:
the moment a token reached the frontend, streaming or not), outcome, tokens,
duration. Label values are lowercase (`stream="true"`), as Prometheus users expect.

`Observation` is the one place these are kept; whoever reads the events
tells it of each event's pieces and of the end. A stream's writer calls it
in its own loop (api/respond.py), so a token crosses no layer for its
metrics; `observed` wraps an event stream in it for everyone else.

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


class Observation:
    """One response's metrics, from its start (`__init__`: in flight) to its
    end (`end`, once, with the outcome's status)."""

    __slots__ = (
        "_resp",
        "_metrics",
        "_endpoint",
        "_stream",
        "_t0",
        "_timing",
        "_series",
        "_observe_gap",
        "_span",
        "_first",
        "_last",
        "_ended",
    )

    def __init__(
        self,
        resp: StartedResponse,
        metrics: Metrics,
        endpoint: str,
        stream: bool,
        t0: float,
        timing: StreamTiming | None = None,
    ) -> None:
        self._resp = resp
        self._metrics = metrics
        self._endpoint = endpoint
        self._stream = stream
        self._t0 = t0
        self._timing = timing
        model = resp.served.name  # aliases count as their model
        self._series = series = metrics.series(model)
        gap = series.itl.observe
        self._observe_gap = gap if timing is None else _kept(gap, timing)
        self._span = tracing.current()  # the request's span (tracing on), told of the first token
        self._first = self._last = 0.0
        self._ended = False
        series.in_flight.inc()
        if metrics.answers is not None:  # rotor frontend: what the planner reads (api/answers.py)
            metrics.answers.begin(model)

    def pieces(self) -> None:
        """An event brought generated pieces: now is a token's time."""
        now = time.perf_counter()
        last = self._last
        if last:
            self._observe_gap(now - last)
        else:
            ttft = now - self._t0
            self._series.ttft.observe(ttft)
            first_token(self._span, ttft)
            self._first = now
            if self._timing is not None:
                self._timing.first = now
        self._last = now

    def failed(self, why: str) -> None:
        """The response failed after it began (said on the request's span)."""
        self._span.fail(f"the response failed after it began: {why}")

    def end(self, status: str) -> None:
        """The response is over: "200", "500", or "cancelled" (the client left)."""
        if self._ended:
            return
        self._ended = True
        metrics, series, resp = self._metrics, self._series, self._resp
        model = resp.served.name
        t0, first, last = self._t0, self._first, self._last
        series.in_flight.dec()
        metrics.outcome(model, self._endpoint, flag(self._stream), status).inc()
        usage = resp.usage
        series.prompt_tokens.inc(usage.prompt_tokens)
        series.completion_tokens.inc(usage.completion_tokens)
        series.duration.observe(time.perf_counter() - t0)
        if metrics.answers is not None:
            n = usage.completion_tokens
            metrics.answers.end(
                model,
                first - t0 if first else None,
                (last - first) / (n - 1) if first and n > 1 else None,
                usage.prompt_tokens,
                n,
            )


async def observed(
    resp: StartedResponse,
    metrics: Metrics,
    endpoint: str,
    stream: bool,
    t0: float,
    timing: StreamTiming | None = None,
) -> AsyncGenerator[ChoiceEvent, None]:
    """`resp`'s events, observed (non-streamed bodies, KServe)."""
    obs = Observation(resp, metrics, endpoint, stream, t0, timing)
    status = "200"
    try:
        async for event in resp.events:
            if event.pieces:
                obs.pieces()
            yield event
    except Exception as e:  # ResponseFailed, or a bug
        status = "500"
        obs.failed(str(e))
        raise
    except BaseException:  # the client went away (cancelled, or the stream was closed)
        status = "cancelled"
        raise
    finally:
        await resp.events.aclose()
        obs.end(status)


def _kept(observe: Callable[[float], None], timing: StreamTiming) -> Callable[[float], None]:
    """`observe`, which also keeps each gap for the request log."""
    keep = timing.gaps.append

    def both(gap: float) -> None:
        observe(gap)
        keep(gap)

    return both
