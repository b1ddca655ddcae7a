"""The workers of one model, and the engine client that routes over them.

`Pool.generate` is the Engine contract over remote workers: choose a worker
(the router mode), stream its outputs, and when the worker becomes
unavailable mid-stream (killed, partitioned, lease gone, silent) resend the
request to another one (router/migration.py), up to `migration_limit` times,
so the consumer sees one uninterrupted stream.

The pool reaches its workers through a `WorkerLink` (the NATS request plane
fills it), and tells whoever built it when a worker joins (`on_join`).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rotor.model.card import ModelCard
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest, EngineState
from rotor.protocol.lease import Lease
from rotor.router import migration
from rotor.router.kv import KVRouter, KVStats
from rotor.router.modes import Decision, LocalLoad, Router, WorkerState

log = logging.getLogger("rotor.router")

_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(EngineState))
DEFAULT_REQUEST_TIMEOUT_S = 30.0


class WorkerLink(Protocol):
    """What a pool needs of the request plane."""

    def generate(
        self, worker_id: str, request: EngineRequest, request_timeout: float
    ) -> AsyncIterator[EngineOutput]:
        """`request` on one worker; closing the stream early aborts it there."""
        ...

    def worker_gone(self, worker_id: str) -> None:
        """The worker left: its running streams end now (and may migrate)."""
        ...


@dataclass
class PoolStats:
    """What /metrics reports about routing (`rotor_router_*`)."""

    decisions: collections.Counter[str] = field(default_factory=collections.Counter)
    migrations: collections.Counter[str] = field(default_factory=collections.Counter)
    no_worker: int = 0


class Pool:
    def __init__(
        self,
        card: ModelCard,
        link: WorkerLink,
        router: Router,
        migration_limit: int = 3,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
        on_join: Callable[[str], None] | None = None,
    ) -> None:
        self.card = card
        self.link = link
        self.router = router
        self.migration_limit = migration_limit
        self.request_timeout = request_timeout
        self.on_join = on_join
        self.workers: dict[str, Lease] = {}
        self.load = LocalLoad()
        self.stats = PoolStats()
        self._decisions: dict[str, Decision] = {}

    @property
    def kv(self) -> KVRouter | None:
        return self.router if isinstance(self.router, KVRouter) else None

    # -- membership ------------------------------------------------------------------

    def upsert(self, lease: Lease) -> None:
        new = lease.worker_id not in self.workers
        self.workers[lease.worker_id] = lease
        if new and self.on_join is not None:
            self.on_join(lease.worker_id)

    def remove(self, worker_id: str) -> None:
        self.workers.pop(worker_id, None)
        self.link.worker_gone(worker_id)
        if isinstance(self.router, WorkerState):
            self.router.remove_worker(worker_id)

    def live(self) -> list[Lease]:
        return [w for w in self.workers.values() if w.status == "serving"]

    def describe(self) -> list[dict[str, Any]]:
        """The live workers, for /health."""
        kv = self.kv
        index = kv.index if kv is not None else None
        out = []
        for w in sorted(self.live(), key=lambda w: w.worker_id):
            info = {
                "id": w.worker_id,
                "address": w.address,
                "active_requests": w.state.active_requests,
                "in_flight_here": self.load.in_flight[w.worker_id],
                "kv_blocks_used": w.state.kv_blocks_total - w.state.kv_blocks_free,
            }
            if index is not None:  # kv routing: what this frontend's index holds of it
                info["kv_blocks_indexed"] = index.num_blocks(w.worker_id)
            out.append(info)
        return out

    def kv_stats(self) -> KVStats | None:
        kv = self.kv
        return kv.stats if kv is not None else None

    # -- the engine contract ------------------------------------------------------------

    def state(self) -> EngineState:
        total = EngineState()
        for w in self.live():
            for name in _STATE_FIELDS:
                setattr(total, name, getattr(total, name) + getattr(w.state, name))
        return total

    def routed(self, request_id: str) -> dict[str, str]:
        decision = self._decisions.get(request_id)
        return dict(decision.headers) if decision is not None else {}

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        rid = request.request_id
        progress = migration.Progress()
        tried: set[str] = set()
        attempt = request
        migrations = 0
        try:
            while True:
                decision = self._choose(attempt, tried)
                self._decisions.setdefault(rid, decision)
                worker = decision.worker_id
                prefill = self._sent(worker, attempt, decision)
                stream = self.link.generate(worker, attempt, self.request_timeout)
                try:
                    async for out in stream:
                        if prefill:
                            self._prefilled(worker, prefill)
                            prefill = 0
                        progress.add(out)
                        yield out
                    return
                except EngineError as e:
                    refused = migration.refusal(
                        e, migrations, self.migration_limit, request, self.card
                    )
                    if refused is not None:
                        raise refused from None
                    tried.add(worker)
                    migrations += 1
                    self.stats.migrations[e.cause or "unavailable"] += 1
                    log.warning(
                        "request %s: %s; migrating (%d/%d) with %d tokens so far",
                        rid,
                        e.message,
                        migrations,
                        self.migration_limit,
                        progress.tokens,
                    )
                    attempt = migration.resumed(request, progress, migrations)
                finally:
                    await stream.aclose()  # type: ignore[attr-defined]  # aborts it if it runs
                    self._done(worker, prefill)
        finally:
            self._decisions.pop(rid, None)

    # -- the frontend's own view of each worker's load ----------------------------------

    def _sent(self, worker: str, request: EngineRequest, decision: Decision) -> int:
        """Count a request sent to `worker`; the prompt tokens it must compute."""
        load = self.load
        load.in_flight[worker] += 1
        prefill = decision.prefill_tokens
        prefill = len(request.token_ids) if prefill is None else prefill
        load.prefilling[worker] += prefill
        return prefill

    def _prefilled(self, worker: str, tokens: int) -> None:
        prefilling = self.load.prefilling
        prefilling[worker] -= tokens
        if prefilling[worker] <= 0:
            del prefilling[worker]

    def _done(self, worker: str, prefill: int) -> None:
        self._prefilled(worker, prefill)
        in_flight = self.load.in_flight
        in_flight[worker] -= 1
        if in_flight[worker] <= 0:
            del in_flight[worker]

    def _choose(self, request: EngineRequest, tried: set[str]) -> Decision:
        live = self.live()
        candidates = [w for w in live if w.worker_id not in tried] or live
        if not candidates:
            self.stats.no_worker += 1
            raise EngineError(
                f"no live worker serves the model {self.card.name!r}",
                "unavailable",
                cause="no_worker",
            )
        decision = self.router.choose(candidates, request, self.load)
        self.stats.decisions[decision.worker_id] += 1
        decision.headers.setdefault("x-rotor-worker", decision.worker_id)
        return decision
