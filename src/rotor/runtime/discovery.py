"""The frontend side of discovery: which workers are live, for which model.

It reads the workers bucket once at start (workers that were there before
this frontend), then follows every lease as it is renewed or withdrawn on
`rotor.lease.>`. A worker not heard from for `LEASE_TTL_S` is gone. The
first worker of a model brings its card (fetched once from the object store
by hash) and so the model; a worker whose card disagrees with its model's
(another tokenizer or template) is refused with a log line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg

from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol import codec
from rotor.router.pool import Pool
from rotor.runtime import subjects
from rotor.runtime.lease import LEASE_TTL_S, Lease

log = logging.getLogger("rotor.discovery")

# (card, tokenizer, compat hash) -> the pool that now serves the model.
NewModel = Callable[[ModelCard, Tokenizer | None, str], Pool]


class Discovery:
    def __init__(
        self,
        nc: Client,
        new_model: NewModel,
        clock: Callable[[], float] = time.monotonic,
        lease_ttl: float = LEASE_TTL_S,
    ) -> None:
        self.nc = nc
        self.new_model = new_model
        self.clock = clock
        self.lease_ttl = lease_ttl
        self.pools: dict[str, Pool] = {}
        self.compat: dict[str, str] = {}  # model -> its cards' compat hash
        self.seen: dict[str, tuple[str, float]] = {}  # worker -> (model, last heard)
        self._refused: set[str] = set()
        self._loading: dict[str, asyncio.Task[None]] = {}  # model -> card fetch
        self._tasks: list[asyncio.Task[None]] = []
        self._sub = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(subjects.LEASE_PREFIX + "*", cb=self._on_msg)
        await self._read_bucket()
        self._tasks.append(asyncio.create_task(self._expire_forever(), name="lease-expiry"))

    async def stop(self) -> None:
        for task in [*self._tasks, *self._loading.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._loading.values(), return_exceptions=True)
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:
                pass

    async def _read_bucket(self) -> None:
        try:
            kv = await self.nc.jetstream().key_value(subjects.WORKERS_BUCKET)
            keys = await kv.keys()
        except Exception:  # no bucket or no keys yet: leases will come
            return
        for key in keys:
            try:
                entry = await kv.get(key)
                await self.on_lease(Lease.decode(entry.value or b""))
            except Exception as e:
                log.debug("skipping lease %s: %s", key, e)

    async def _on_msg(self, msg: Msg) -> None:
        try:
            lease = Lease.decode(msg.data)
        except ValueError as e:
            log.warning("ignoring a malformed lease on %s: %s", msg.subject, e)
            return
        await self.on_lease(lease)

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
        if wid not in pool.workers:
            log.info("worker %s (%s) serves %r", wid, lease.address, lease.model)
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
        store = await self.nc.jetstream().object_store(subjects.CARDS_STORE)
        result = await store.get(lease.card)
        card, tok = codec.decode_card(result.data or b"")
        if lease.model not in self.pools:
            self.compat[lease.model] = lease.compat
            self.pools[lease.model] = self.new_model(card, tok, lease.compat)
            log.info("model %r is served (card %s)", lease.model, lease.card[:12])

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
            await asyncio.sleep(0.25)
            self.expire()
