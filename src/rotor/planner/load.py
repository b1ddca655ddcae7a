"""Load mode: size a pool from what its workers and the frontends say now,
with no profile. Kubernetes's HPA rule on the latency the users see, plus
a memory of where the SLA broke, so a scale-down never returns to it.

For a pool of `n` serving workers and its latency signal — the interval's
p90 time to first token against `--ttft` (prefill and agg pools) and p90
time per output token against `--itl` (decode and agg pools), each a ratio
`r = observed / target`, the larger one counting — and two loads: `Q`, the
requests its workers hold or queue now (summed), and `T`, the tokens per
second its work came to in the interval (prompt tokens for a prefill pool,
answer tokens for a decode pool, both for agg):

- **up** when `r > 1 + TOLERANCE`: `n' = clamp(ceil(n · r), n + 1, 2n)`, or
  more when a remembered limit says so (`ceil(X / (HEADROOM · X_miss))` for
  each load X, where `X_miss` is the lowest per-worker X at which the SLA
  was seen missed). Also up, before any miss shows, when a per-worker load
  reaches `HEADROOM · X_miss` of a limit a miss set (a ramp that already
  broke the SLA once is met ahead of time).
- **down** by one when removing a worker keeps `r · n / (n − 1)` under
  `HEADROOM`, and each load `X / (n − 1)` under `HEADROOM · X_miss` once
  known. Latency is flat until a worker saturates, so the loads are what
  stop a scale-down from walking back into the miss (replicas that fight).
  `Q` leads (it grows the moment requests queue) but is noisy and swells
  past the limit once requests queue; `T` is linear in the offered load and,
  measured on finished requests, tops out at what the workers can serve, so
  its memory is the pool's real capacity. A scale-down needs both.
- **hold** otherwise. guard.py adds the rest: min/max, cool-down, how many
  intervals a scale-down must be wanted, one action at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rotor.planner.observation import Observation, PoolName, Traffic, WorkerLoad

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
    missed_last: bool = False  # set by a miss, not raised by the SLA held above it

    def missed(self, per_worker: float) -> None:
        if per_worker > 0 and (self.load is None or per_worker < self.load):
            self.load = per_worker
            self.missed_last = True

    def met(self, per_worker: float) -> None:
        """The SLA held at this load: a miss below it was a burst, not the limit."""
        if self.load is not None and per_worker > self.load:
            self.load = per_worker
            self.missed_last = False

    def limit(self) -> float | None:
        return HEADROOM * self.load if self.load is not None else None


@dataclass
class PoolMemory:
    """A pool's two remembered limits: requests held (`queue`), tokens per second (`rate`)."""

    queue: MissMemory = field(default_factory=MissMemory)
    rate: MissMemory = field(default_factory=MissMemory)


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


def pool_rate(traffic: Traffic, pool: PoolName) -> float:
    """Tokens per second of the pool's work in the interval (finished requests)."""
    if traffic.seconds <= 0:
        return 0.0
    if pool == "prefill":
        tokens = traffic.prompt_tokens
    elif pool == "decode":
        tokens = traffic.completion_tokens
    else:
        tokens = traffic.prompt_tokens + traffic.completion_tokens
    return tokens / traffic.seconds


def size_pool(
    obs: Observation, pool: PoolName, ttft: float, itl: float, memory: PoolMemory
) -> Proposal:
    workers = obs.pool(pool)
    n = len(workers)
    loads = ((pool_load(workers), memory.queue), (pool_rate(obs.traffic, pool), memory.rate))
    r, what = _ratio(obs, pool, ttft, itl)
    if n == 0:
        return Proposal(pool, 0, "no serving worker")
    seen = f"load {loads[0][0] / n:.1f}/worker, {loads[1][0] / n:.0f} tok/s/worker"
    if r is not None and r > 1 + TOLERANCE:
        want = min(max(math.ceil(n * r), n + 1), 2 * n)
        for total, mem in loads:
            mem.missed(total / n)
            limit = mem.limit()
            if limit is not None:
                want = max(want, math.ceil(total / limit))
        return Proposal(pool, want, f"{what}: SLA missed at {seen}")
    if r is not None and r <= 1:
        for total, mem in loads:
            mem.met(total / n)
    for total, mem in loads:  # nearing a limit a miss set: up before latency shows it
        limit = mem.limit()
        if mem.missed_last and limit is not None and total / n >= limit:
            want = max(n + 1, *(math.ceil(t / lim) for t, m in loads if (lim := m.limit())))
            return Proposal(pool, want, f"{seen}: near where the SLA broke")
    if n > 1:
        latency_ok = r is None or r * n / (n - 1) < HEADROOM
        loads_ok = all((lim := m.limit()) is None or t / (n - 1) < lim for t, m in loads)
        if latency_ok and loads_ok:
            return Proposal(pool, n - 1, f"headroom: {what}, {seen}")
    return Proposal(pool, n, f"holds: {what}, {seen}")


class LoadSizer:
    """Load mode over a model's pools, each with its own memory of misses."""

    def __init__(self, ttft: float, itl: float) -> None:
        self.ttft = ttft
        self.itl = itl
        self.memory: dict[PoolName, PoolMemory] = {}

    def propose(self, obs: Observation, pools: tuple[PoolName, ...]) -> list[Proposal]:
        return [
            size_pool(obs, p, self.ttft, self.itl, self.memory.setdefault(p, PoolMemory()))
            for p in pools
        ]
