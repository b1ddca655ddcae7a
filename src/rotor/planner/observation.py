"""What the planner sees of one interval: the traffic all frontends served
(their per-request figures, merged) and each pool's load (its workers'
leases). Plain values; fleet.py builds them from what the NATS feeds
deliver, tests build them by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

# A model's worker pools: aggregated workers, or prefill and decode workers.
PoolName = Literal["agg", "prefill", "decode"]
POOLS: tuple[PoolName, ...] = ("agg", "prefill", "decode")


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile of `values` (linear between order statistics); None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Traffic:
    """The requests every frontend answered for one model in one interval.
    `ttft_s` and `tpot_s` are per-request samples (time to first token; mean
    time per output token after the first), at most a few thousand per
    interval (each frontend samples beyond that); counts and sums are exact."""

    seconds: float  # the interval's length
    requests: int = 0  # requests that finished in the interval
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: list[float] = field(default_factory=list)
    tpot_s: list[float] = field(default_factory=list)
    in_flight: int = 0  # requests running at the interval's end, all frontends
    frontends: int = 0  # frontends heard from in the interval

    @property
    def rate(self) -> float:
        """Requests per second."""
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    @property
    def isl(self) -> float:
        """Mean prompt length (tokens)."""
        return self.prompt_tokens / self.requests if self.requests else 0.0

    @property
    def osl(self) -> float:
        """Mean answer length (tokens)."""
        return self.completion_tokens / self.requests if self.requests else 0.0

    def ttft(self, q: float = 0.9) -> float | None:
        return quantile(self.ttft_s, q)

    def tpot(self, q: float = 0.9) -> float | None:
        return quantile(self.tpot_s, q)


@dataclass(frozen=True)
class WorkerLoad:
    """One live worker over the interval, from its leases."""

    worker_id: str
    pool: PoolName
    address: str  # host:pid, as its lease says
    leaving: bool = False  # draining: takes no new requests
    running: float = 0.0  # mean sequences being stepped
    waiting: float = 0.0  # mean sequences queued for their first step
    active: float = 0.0  # mean requests held
    pending_prefill_tokens: float = 0.0  # mean prompt tokens admitted, not yet computed
    kv_usage: float = 0.0  # mean share of KV blocks in use (0..1)
    steps: int = 0  # engine steps in the interval
    step_s: float | None = None  # mean seconds per engine step (None: no steps or not said)
    max_batched_tokens: int = 0  # the engine's token budget of one step (0: not said)

    @property
    def load(self) -> float:
        """What scale-down compares to pick the least-loaded worker."""
        return self.active + self.waiting


@dataclass(frozen=True)
class Observation:
    """One interval of one model: when it ended, its traffic, and its workers by pool."""

    at: float  # the planner's clock at the interval's end
    traffic: Traffic
    workers: list[WorkerLoad] = field(default_factory=list)

    def pool(self, name: PoolName) -> list[WorkerLoad]:
        """The pool's workers that still take requests."""
        return [w for w in self.workers if w.pool == name and not w.leaving]

    def live(self, name: PoolName) -> int:
        return len(self.pool(name))
