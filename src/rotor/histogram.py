"""Observations in fixed buckets, without a lock: the router's handover times
(router/stats.py) and the per-token histograms of /metrics (api/histogram.py).
One event loop writes a histogram; a scrape reads its counts."""

from __future__ import annotations

import bisect

from prometheus_client.utils import floatToGoString


class Histogram:
    """Observations in fixed buckets: `counts[i]` at or below `bounds[i]` and
    above the bound before it, the last the rest. An observation is a bisect
    and three additions, no lock."""

    __slots__ = ("bounds", "counts", "total", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, count) pairs as Prometheus writes them, "+Inf" last."""
        out, running = [], 0
        les = (*map(floatToGoString, self.bounds), "+Inf")
        for bound, n in zip(les, list(self.counts), strict=True):
            running += n
            out.append((bound, float(running)))
        return out
