"""What the planner knows of the fleet between two decisions: every lease
each worker sent (its load, every second) and every frontend's answered
requests (every second), folded into one `Observation` per model when the
interval ends. Pure: the NATS feeds call `on_lease` / `on_stats`, the
planner calls `observe`, tests call all three with their own clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rotor.planner.observation import Observation, Traffic, WorkerLoad
from rotor.protocol.lease import LEASE_TTL_S, Lease


@dataclass
class _Worker:
    last: Lease
    heard: float
    samples: list[Lease] = field(default_factory=list)  # this interval's leases
    before: Lease | None = None  # the last lease of the interval before (counters' base)


@dataclass
class _Traffic:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    frontends: set[str] = field(default_factory=set)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _load(w: _Worker) -> WorkerLoad:
    leases = w.samples or [w.last]
    states = [lease.state for lease in leases]
    now = w.last.state
    base = w.before.state if w.before is not None else leases[0].state
    steps = max(0, now.steps - base.steps)
    simulated = now.simulated_ms - base.simulated_ms
    usage = [
        (s.kv_blocks_total - s.kv_blocks_free) / s.kv_blocks_total
        for s in states
        if s.kv_blocks_total > 0
    ]
    return WorkerLoad(
        worker_id=w.last.worker_id,
        pool=w.last.role,
        address=w.last.address,
        leaving=w.last.status == "leaving",
        running=_mean([s.running for s in states]),
        waiting=_mean([s.waiting for s in states]),
        active=_mean([s.active_requests for s in states]),
        pending_prefill_tokens=_mean([s.pending_prefill_tokens for s in states]),
        kv_usage=_mean(usage),
        steps=steps,
        step_s=simulated / steps / 1000.0 if steps and simulated > 0 else None,
        max_batched_tokens=now.max_batched_tokens,
    )


class Fleet:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, lease_ttl: float = LEASE_TTL_S
    ) -> None:
        self.clock = clock
        self.lease_ttl = lease_ttl
        self._workers: dict[str, _Worker] = {}
        self._traffic: dict[str, _Traffic] = {}
        self._in_flight: dict[tuple[str, str], tuple[int, float]] = {}  # (frontend, model)
        self._since: dict[str, float] = {}  # model -> the interval's start

    async def on_lease(self, lease: Lease) -> None:
        now = self.clock()
        w = self._workers.get(lease.worker_id)
        if w is None:
            self._workers[lease.worker_id] = _Worker(lease, now, [lease])
            return
        w.last, w.heard = lease, now
        w.samples.append(lease)

    def on_stats(self, frontend: str, models: dict[str, dict[str, Any]]) -> None:
        now = self.clock()
        for model, period in models.items():
            t = self._traffic.setdefault(model, _Traffic())
            try:
                t.requests += int(period.get("requests", 0))
                t.prompt_tokens += int(period.get("prompt_tokens", 0))
                t.completion_tokens += int(period.get("completion_tokens", 0))
                t.ttft.extend(float(x) for x in period.get("ttft", ()))
                t.tpot.extend(float(x) for x in period.get("tpot", ()))
                self._in_flight[frontend, model] = (int(period.get("in_flight", 0)), now)
            except (TypeError, ValueError):  # a malformed period counts for nothing more
                continue
            t.frontends.add(frontend)

    def _expire(self, now: float) -> None:
        for wid, w in list(self._workers.items()):
            if now - w.heard > self.lease_ttl:
                del self._workers[wid]
        for key, (_, heard) in list(self._in_flight.items()):
            if now - heard > self.lease_ttl:
                del self._in_flight[key]

    def workers(self, model: str) -> list[WorkerLoad]:
        """The model's live workers now (leaving ones included), without ending the interval."""
        self._expire(self.clock())
        return [_load(w) for w in self._workers.values() if w.last.model == model]

    def observe(self, model: str) -> Observation:
        """The model's interval since the last call: its traffic and each live
        worker's load. Starts the next interval."""
        now = self.clock()
        self._expire(now)
        since = self._since.get(model)
        self._since[model] = now
        t = self._traffic.pop(model, _Traffic())
        in_flight = sum(n for (_, m), (n, _) in self._in_flight.items() if m == model)
        traffic = Traffic(
            seconds=now - since if since is not None else 0.0,
            requests=t.requests,
            prompt_tokens=t.prompt_tokens,
            completion_tokens=t.completion_tokens,
            ttft_s=t.ttft,
            tpot_s=t.tpot,
            in_flight=in_flight,
            frontends=len(t.frontends),
        )
        loads = []
        for w in self._workers.values():
            if w.last.model != model:
                continue
            loads.append(_load(w))
            w.before, w.samples = w.last, []
        return Observation(now, traffic, loads)
