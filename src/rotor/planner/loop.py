"""The planner: every interval, observe → size → guard → act, and one log
line per pool saying what it saw, what it wants and why."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from rotor.planner.connectors import Connector, ConnectorError
from rotor.planner.guard import Change, Guard, Limits
from rotor.planner.load import Proposal
from rotor.planner.metrics import PlannerMetrics
from rotor.planner.observation import Observation, PoolName

log = logging.getLogger("rotor.planner")


class Sizer(Protocol):
    def propose(self, obs: Observation, pools: tuple[PoolName, ...]) -> list[Proposal]: ...


class Observer(Protocol):
    def observe(self, model: str) -> Observation: ...


def pools_of(mode: str) -> tuple[PoolName, ...]:
    return ("agg",) if mode == "agg" else ("prefill", "decode")


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.3g}{unit}"


class Planner:
    def __init__(
        self,
        model: str,
        pools: tuple[PoolName, ...],
        fleet: Observer,
        connector: Connector,
        sizer: Sizer,
        limits: Limits,
        metrics: PlannerMetrics | None = None,
        dry_run: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = model
        self.pools = pools
        self.fleet = fleet
        self.connector = connector
        self.sizer = sizer
        self.guard = Guard(limits)
        self.metrics = metrics or PlannerMetrics()
        self.dry_run = dry_run
        self.clock = clock
        self._failures: dict[PoolName, int] = {}
        self._timeouts: dict[PoolName, int] = {}

    async def step(self) -> list[Change]:
        """One decision: the changes asked for (none while one is in flight)."""
        obs = self.fleet.observe(self.model)
        now = self.clock()
        self.metrics.saw(obs, self.pools)
        self._count_failures()
        live = {p: obs.live(p) for p in self.pools}
        settled = self.guard.settled(live, now)
        self._sync_timeouts()
        if not settled:
            pending = self.guard.pending
            for pool in self.pools:
                self.metrics.decisions.labels(pool, "wait").inc()
            log.info(
                "waiting: %s (asked %.0f s ago)",
                _counts(live, pending.targets if pending else {}),
                now - (pending.since if pending else now),
                extra={"fields": {"live": live}},
            )
            return []
        proposals = self.sizer.propose(obs, self.pools)
        changes, held = self.guard.review(proposals, live, now)
        by_pool = {c.pool: c for c in changes}
        for p in proposals:
            change = by_pool.get(p.pool)
            action = change.action if change else "hold"
            target = change.target if change else live[p.pool]
            self.metrics.target.labels(p.pool).set(target)
            self.metrics.decisions.labels(p.pool, action).inc()
            self._log(obs, p, live[p.pool], target, action, held)
        if changes and not self.dry_run:
            await self._act(obs, changes, live, now)
        return changes

    async def _act(
        self, obs: Observation, changes: list[Change], live: dict[PoolName, int], now: float
    ) -> None:
        for c in changes:
            drain = sorted(obs.pool(c.pool), key=lambda w: w.load) if c.action == "down" else []
            try:
                await self.connector.scale(c.pool, c.target, drain[: c.live - c.target])
            except ConnectorError as e:
                self.metrics.connector_errors.inc()
                log.error("%s pool: %s", c.pool, e)
                return
        self.guard.acted(changes, live, now)

    def _log(
        self,
        obs: Observation,
        p: Proposal,
        live: int,
        target: int,
        action: str,
        held: list[str],
    ) -> None:
        t = obs.traffic
        workers = obs.pool(p.pool)
        fields: dict[str, Any] = {
            "pool": p.pool,
            "action": action,
            "live": live,
            "target": target,
            "wanted": p.workers,
            "reason": p.reason,
            "rate": round(t.rate, 3),
            "isl": round(t.isl, 1),
            "osl": round(t.osl, 1),
            "ttft_p90": t.ttft(0.9),
            "itl_p90": t.tpot(0.9),
            "in_flight": t.in_flight,
            "waiting": sum(w.waiting for w in workers),
            "frontends": t.frontends,
            "dry_run": self.dry_run,
        }
        hold = [h for h in held if h.startswith(p.pool + ":")]
        why = p.reason + (f"; {'; '.join(h.split(': ', 1)[1] for h in hold)}" if hold else "")
        log.info(
            "%s%s %s %d→%d: %s | %.2f req/s, isl %.0f, osl %.0f, ttft p90 %s, itl p90 %s",
            "[dry run] " if self.dry_run else "",
            p.pool,
            action,
            live,
            target,
            why,
            t.rate,
            t.isl,
            t.osl,
            _fmt(t.ttft(0.9), " s"),
            _fmt(t.tpot(0.9), " s"),
            extra={"fields": fields},
        )

    def _count_failures(self) -> None:
        failures = getattr(self.connector, "failures", None)
        if failures is None:
            return
        for pool in self.pools:
            n = failures(pool)
            seen = self._failures.get(pool, 0)
            if n > seen:
                self.metrics.failures.labels(pool).inc(n - seen)
                last = getattr(self.connector, "last_failure", lambda _p: None)(pool)
                log.warning("%s pool: %d worker(s) failed to run: %s", pool, n - seen, last)
                self._failures[pool] = n

    def _sync_timeouts(self) -> None:
        for pool, n in self.guard.timeouts.items():
            seen = self._timeouts.get(pool, 0)
            if n > seen:
                log.warning("%s pool: the workers asked for did not settle in time", pool)
                self.metrics.timeouts.labels(pool).inc(n - seen)
                self._timeouts[pool] = n

    async def run(self, interval: float, stop: asyncio.Event) -> None:
        """Decide at once (a pool below its minimum fills now), then every interval."""
        while not stop.is_set():
            try:
                await self.step()
            except Exception:  # one bad interval must not end the planner
                log.exception("planner step failed")
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except asyncio.TimeoutError:
                pass


def _counts(live: dict[PoolName, int], targets: dict[PoolName, int]) -> str:
    return ", ".join(f"{p} {live.get(p, 0)}/{n}" for p, n in targets.items())
