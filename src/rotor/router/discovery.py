"""The frontend side of discovery: which workers are live, for which model.

Leases arrive from the runtime (runtime/nats/leases.py reads them off NATS)
and are judged here. A worker not heard from for `lease_ttl` is gone, and so
is one the request plane found nobody serving (`gone`); one whose lease says
its engine is unhealthy (it failed its canary) stays known but is not live
(router/pool.Pool.live) until a lease says it answers again. The
first worker of a model brings its card (fetched once, by hash, from a
`CardSource`) and so the model's pool (`new_model`); a worker whose card
disagrees with its model's (another tokenizer or template) is refused with a
log line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol.lease import LEASE_TTL_S, Lease
from rotor.router.pool import Pool

log = logging.getLogger("rotor.discovery")

EXPIRE_EVERY_S = 0.25

# (card, tokenizer) -> the pool that now serves the model.
NewModel = Callable[[ModelCard, Tokenizer | None], Pool]


class CardSource(Protocol):
    async def fetch(self, lease: Lease) -> tuple[ModelCard, Tokenizer | None]:
        """The card (and tokenizer) the lease names."""
        ...


class Discovery:
    def __init__(
        self,
        new_model: NewModel,
        cards: CardSource,
        clock: Callable[[], float] = time.monotonic,
        lease_ttl: float = LEASE_TTL_S,
    ) -> None:
        self.new_model = new_model
        self.cards = cards
        self.clock = clock
        self.lease_ttl = lease_ttl
        self.pools: dict[str, Pool] = {}
        self.compat: dict[str, str] = {}  # model -> its cards' compat hash
        self.seen: dict[str, tuple[str, float]] = {}  # worker -> (model, last heard)
        self._refused: set[str] = set()
        self._loading: dict[str, asyncio.Task[None]] = {}  # model -> card fetch
        self._expiry: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._expiry = asyncio.create_task(self._expire_forever(), name="lease-expiry")

    async def stop(self) -> None:
        tasks = [t for t in (self._expiry, *self._loading.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def pool_of(self, worker_id: str) -> Pool | None:
        """The pool a live worker belongs to."""
        seen = self.seen.get(worker_id)
        return self.pools.get(seen[0]) if seen is not None else None

    async def on_lease(self, lease: Lease) -> None:
        wid = lease.worker_id
        if wid in self._refused:
            return
        pool = self.pools.get(lease.model)
        if lease.status == "leaving":  # no new requests; those it runs go on
            if pool is not None and wid in pool.workers:
                if pool.workers[wid].status != "leaving":
                    log.info("worker %s is leaving", wid)
                pool.upsert(lease)
                self.seen[wid] = (lease.model, self.clock())
            return
        if pool is None:
            await self._load_model(lease)
            pool = self.pools.get(lease.model)
            if pool is None:
                return
        if self.compat.get(lease.model) != lease.compat:
            self._refused.add(wid)
            log.error(
                "refusing worker %s (%s): its card for %r has another tokenizer or chat "
                "template than the model's other workers (%s != %s)",
                wid,
                lease.address,
                lease.model,
                lease.compat,
                self.compat.get(lease.model),
            )
            return
        known = pool.workers.get(wid)
        if known is None:
            log.info("worker %s (%s) serves %r", wid, lease.address, lease.model)
        if lease.healthy != (known.healthy if known is not None else True):
            if lease.healthy:
                log.warning("worker %s is healthy again: its engine answered a canary", wid)
            else:
                log.warning("worker %s is unhealthy: its engine failed a canary; not routed", wid)
        pool.upsert(lease)
        self.seen[wid] = (lease.model, self.clock())

    async def _load_model(self, lease: Lease) -> None:
        """Fetch the model's card (once, however many leases arrive meanwhile)."""
        task = self._loading.get(lease.model)
        if task is None:
            task = asyncio.create_task(self._fetch_card(lease))
            self._loading[lease.model] = task
        try:
            await asyncio.shield(task)
        except Exception as e:
            log.warning(
                "could not load the card of %r from worker %s: %s", lease.model, lease.worker_id, e
            )
        finally:
            if task.done():
                self._loading.pop(lease.model, None)

    async def _fetch_card(self, lease: Lease) -> None:
        card, tok = await self.cards.fetch(lease)
        if lease.model not in self.pools:
            self.compat[lease.model] = lease.compat
            self.pools[lease.model] = self.new_model(card, tok)
            log.info("model %r is served (card %s)", lease.model, lease.card[:12])

    def gone(self, worker_id: str) -> None:
        """The request plane found nobody serving the worker (a request to it
        was answered "no responders"): it is dropped now, not when its lease
        runs out. A worker that is alive after all (cut off from NATS a
        moment) comes back with its next lease."""
        self._drop(worker_id, "answers no requests: gone")

    def _drop(self, worker_id: str, why: str) -> None:
        model, _ = self.seen.pop(worker_id, (None, 0.0))
        pool = self.pools.get(model) if model else None
        if pool is not None and worker_id in pool.workers:
            log.warning("worker %s %s", worker_id, why)
            pool.remove(worker_id)

    def expire(self) -> None:
        """Drop every worker not heard from within the lease TTL."""
        now = self.clock()
        for wid, (_, last) in list(self.seen.items()):
            if now - last > self.lease_ttl:
                self._drop(wid, f"sent no lease for {self.lease_ttl:.0f} s: gone")

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(EXPIRE_EVERY_S)
            self.expire()
