"""What a pool counts for /metrics (`rotor_router_*`, `rotor_disagg_*`):
plain counters, read at scrape time; nothing here is on a token's path."""

from __future__ import annotations

import bisect
import collections
from dataclasses import dataclass, field

from prometheus_client.utils import floatToGoString

# Seconds from a prefill worker's answer to the decode worker's first token
# (the KV fetch, the rest of the prompt, one step): the buckets of its histogram.
HANDOVER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    """Observations in fixed buckets: `counts[i]` at or below `bounds[i]` and
    above the bound before it, the last the rest. An observation is a bisect
    and three additions, no lock: one event loop writes it, a scrape reads
    the counts (api/histogram.py's per-token histograms are these too)."""

    __slots__ = ("bounds", "counts", "total", "count")

    def __init__(self, bounds: tuple[float, ...] = HANDOVER_BUCKETS) -> None:
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


@dataclass
class PoolStats:
    decisions: collections.Counter[str] = field(default_factory=collections.Counter)
    migrations: collections.Counter[str] = field(default_factory=collections.Counter)
    no_worker: int = 0
    # session affinity: what became of each turn that named a session (router/sessions.py)
    sessions: collections.Counter[str] = field(default_factory=collections.Counter)
    # disaggregation: (where, reason) of every prefill decision, and handovers
    disagg: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    handover: Histogram = field(default_factory=Histogram)
