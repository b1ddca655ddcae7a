"""The guard rails between a sizing rule's wish and a scale action:

- bounds: each pool within `--min-workers`..`--max-workers`, and all pools
  together within `--max-gpus` (`--gpus-per-worker` each; when the pools want
  more, each keeps its minimum and the rest is shared in proportion);
- one action in flight: no new one until the last has settled (the pools
  have the workers asked for, as their leases show) or `--settle-timeout`
  passed (counted: workers that did not come up);
- scale-up at once; scale-down only after `--cooldown` seconds since the
  last scale-up, only when wanted `--down-intervals` intervals in a row
  (hysteresis: a steady load does not flap), and one worker at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rotor.planner.load import Proposal
from rotor.planner.observation import PoolName


@dataclass(frozen=True)
class Limits:
    min_workers: int = 1
    max_workers: int = 8
    gpus_per_worker: int = 1
    max_gpus: int | None = None
    cooldown: float = 60.0
    down_intervals: int = 3
    settle_timeout: float = 180.0


@dataclass(frozen=True)
class Change:
    pool: PoolName
    live: int
    target: int
    reason: str

    @property
    def action(self) -> str:
        return "up" if self.target > self.live else "down"


@dataclass
class Pending:
    targets: dict[PoolName, int]
    since: float


@dataclass
class Guard:
    limits: Limits
    pending: Pending | None = None
    last_up: float | None = None
    low_streak: dict[PoolName, int] = field(default_factory=dict)
    timeouts: dict[PoolName, int] = field(default_factory=dict)

    def bounded(self, wants: dict[PoolName, int]) -> dict[PoolName, int]:
        """Each pool within min..max, and all of them within the GPU budget."""
        lim = self.limits
        out = {p: min(max(n, lim.min_workers), lim.max_workers) for p, n in wants.items()}
        if lim.max_gpus is None:
            return out
        budget = lim.max_gpus // lim.gpus_per_worker  # workers the GPUs allow
        if sum(out.values()) <= budget:
            return out
        floor = {p: lim.min_workers for p in out}
        spare = max(0, budget - sum(floor.values()))
        extra = {p: out[p] - floor[p] for p in out}
        total = sum(extra.values())
        if total == 0:
            return floor
        return {p: floor[p] + math.floor(spare * extra[p] / total) for p in out}

    def settled(self, live: dict[PoolName, int], now: float) -> bool:
        """Whether the last action is done (or given up on); True if none is in flight."""
        if self.pending is None:
            return True
        if all(live.get(p, 0) == n for p, n in self.pending.targets.items()):
            self.pending = None
            return True
        if now - self.pending.since >= self.limits.settle_timeout:
            for p, n in self.pending.targets.items():
                if live.get(p, 0) != n:
                    self.timeouts[p] = self.timeouts.get(p, 0) + 1
            self.pending = None
            return True
        return False

    def review(
        self, proposals: list[Proposal], live: dict[PoolName, int], now: float
    ) -> tuple[list[Change], list[str]]:
        """The changes to make now, and why the others wait (for the log)."""
        wants = self.bounded({p.pool: p.workers for p in proposals})
        reasons = {p.pool: p.reason for p in proposals}
        changes: list[Change] = []
        held: list[str] = []
        for pool, want in wants.items():
            n = live.get(pool, 0)
            if want > n:
                self.low_streak[pool] = 0
                changes.append(Change(pool, n, want, reasons[pool]))
            elif want < n:
                streak = self.low_streak[pool] = self.low_streak.get(pool, 0) + 1
                if n > self.limits.max_workers:
                    changes.append(Change(pool, n, want, f"{reasons[pool]} (out of bounds)"))
                elif streak < self.limits.down_intervals:
                    held.append(f"{pool}: down wanted {streak}/{self.limits.down_intervals}")
                elif self.last_up is not None and now - self.last_up < self.limits.cooldown:
                    left = self.limits.cooldown - (now - self.last_up)
                    held.append(f"{pool}: cool-down {left:.0f} s after scaling up")
                else:
                    changes.append(Change(pool, n, n - 1, reasons[pool]))
            else:
                self.low_streak[pool] = 0
        return changes, held

    def acted(self, changes: list[Change], live: dict[PoolName, int], now: float) -> None:
        """Changes were asked for: in flight until the pools show them."""
        if not changes:
            return
        targets = dict(live)
        for c in changes:
            targets[c.pool] = c.target
            if c.action == "up":
                self.last_up = now
            else:
                self.low_streak[c.pool] = 0
        self.pending = Pending(targets, now)
