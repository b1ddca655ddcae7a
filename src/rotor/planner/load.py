"""Load mode: size a pool from what its workers and the frontends say now,
with no profile. Kubernetes's HPA rule on the latency the users see, plus
a memory of where the SLA broke, so a scale-down never returns to it.

For a pool of `n` serving workers and its latency signal — the interval's
p90 time to first token against `--ttft` (prefill and agg pools) and p90
time per output token against `--itl` (decode and agg pools), each a ratio
`r = observed / target`, the larger one counting — and its load `L` (the
requests its workers hold or queue, summed):

- **up** when `r > 1 + TOLERANCE`: `n' = clamp(ceil(n · r), n + 1, 2n)`; or
  `ceil(L / (HEADROOM · L_miss))` when that is more, where `L_miss` is the
  lowest per-worker load at which the SLA was seen missed. Also up, before
  any miss, when the per-worker load reaches `HEADROOM · L_miss` (a ramp
  that already broke the SLA once is met ahead of time).
- **down** by one when removing a worker keeps both `r · n / (n − 1)` and
  `L / (n − 1)` (against `HEADROOM · L_miss`, once known) under `HEADROOM`;
  latency is flat until a worker saturates, so the load rule is the one that
  stops a scale-down from walking back into the miss (replicas that fight).
- **hold** otherwise. guard.py adds the rest: min/max, cool-down, how many
  intervals a scale-down must be wanted, one action at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rotor.planner.observation import Observation, PoolName, WorkerLoad

TOLERANCE = 0.1  # |r - 1| within this: hold (HPA's default tolerance)
HEADROOM = 0.8  # a scale-down must leave latency and load under this share of the limit


@dataclass(frozen=True)
class Proposal:
    """What a sizing rule wants for one pool, and why (the decision's log line)."""

    pool: PoolName
    workers: int
    reason: str


@dataclass
class MissMemory:
    """The lowest per-worker load at which a pool missed its SLA (None: never)."""

    load: float | None = None

    def missed(self, per_worker: float) -> None:
        if per_worker > 0 and (self.load is None or per_worker < self.load):
            self.load = per_worker

    def met(self, per_worker: float) -> None:
        """The SLA held at this load: a miss below it was a burst, not the limit."""
        if self.load is not None and per_worker > self.load:
            self.load = per_worker


def _ratio(obs: Observation, pool: PoolName, ttft: float, itl: float) -> tuple[float | None, str]:
    """The pool's worse latency ratio and what it is, from the frontends' p90s."""
    parts: list[tuple[float, str]] = []
    if pool in ("agg", "prefill"):
        seen = obs.traffic.ttft(0.9)
        if seen is not None:
            parts.append((seen / ttft, f"ttft p90 {seen:.3f} s vs {ttft:g} s"))
    if pool in ("agg", "decode"):
        seen = obs.traffic.tpot(0.9)
        if seen is not None:
            parts.append((seen / itl, f"itl p90 {seen:.4f} s vs {itl:g} s"))
    if not parts:
        return None, "no requests"
    return max(parts)


def pool_load(workers: list[WorkerLoad]) -> float:
    return sum(w.load for w in workers)


def size_pool(
    obs: Observation, pool: PoolName, ttft: float, itl: float, memory: MissMemory
) -> Proposal:
    workers = obs.pool(pool)
    n = len(workers)
    load = pool_load(workers)
    r, what = _ratio(obs, pool, ttft, itl)
    if n == 0:
        return Proposal(pool, 0, "no serving worker")
    per_worker = load / n
    if r is not None and r > 1 + TOLERANCE:
        memory.missed(per_worker)
        want = min(max(math.ceil(n * r), n + 1), 2 * n)
        if memory.load is not None:
            want = max(want, math.ceil(load / (HEADROOM * memory.load)))
        return Proposal(pool, want, f"{what}: SLA missed at load {per_worker:.1f}/worker")
    if r is not None and r <= 1:
        memory.met(per_worker)
    limit = HEADROOM * memory.load if memory.load is not None else None
    if limit is not None and per_worker >= limit:
        want = max(n + 1, math.ceil(load / limit))
        return Proposal(
            pool,
            want,
            f"load {per_worker:.1f}/worker ≥ {limit:.1f} (the SLA broke at {memory.load:.1f})",
        )
    if n > 1:
        after = n / (n - 1)
        latency_ok = r is None or r * after < HEADROOM
        load_ok = limit is None or load / (n - 1) < limit
        if latency_ok and load_ok:
            return Proposal(pool, n - 1, f"headroom: {what}, load {per_worker:.1f}/worker")
    return Proposal(pool, n, f"holds: {what}, load {per_worker:.1f}/worker")


class LoadSizer:
    """Load mode over a model's pools, each with its own memory of misses."""

    def __init__(self, ttft: float, itl: float) -> None:
        self.ttft = ttft
        self.itl = itl
        self.memory: dict[PoolName, MissMemory] = {}

    def propose(self, obs: Observation, pools: tuple[PoolName, ...]) -> list[Proposal]:
        return [
            size_pool(obs, p, self.ttft, self.itl, self.memory.setdefault(p, MissMemory()))
            for p in pools
        ]
