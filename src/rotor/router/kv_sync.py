"""Keeping the frontend's copy of every worker's KV blocks in step with the
workers' caches, from their KV events (the runtime delivers them: see
runtime/nats/kv_events.py). A worker that joins, or a gap in its event ids
(an event lost, a frontend restarted), or an event that cannot be read,
brings a resync: the worker's snapshot replaces what the index holds of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from rotor.protocol.kv import KVEvent, KVSnapshot
from rotor.router.kv import KVRouter
from rotor.router.kv_index import Applied

log = logging.getLogger("rotor.kv_sync")

RESYNC_TRIES = 3


class KVSnapshots(Protocol):
    async def snapshot(self, worker: str) -> KVSnapshot:
        """The worker's blocks now (raises when it does not answer)."""
        ...


class KVSync:
    def __init__(self, snapshots: KVSnapshots, router_of: Callable[[str], KVRouter | None]) -> None:
        """`router_of(worker)`: the kv router of the worker's pool, or None."""
        self.snapshots = snapshots
        self.router_of = router_of
        self.resyncs = 0
        self._resyncing: dict[str, asyncio.Task[None]] = {}

    async def stop(self) -> None:
        for task in self._resyncing.values():
            task.cancel()
        await asyncio.gather(*self._resyncing.values(), return_exceptions=True)

    def on_event(self, worker: str, event: KVEvent | None) -> None:
        """One event of the worker's, in the order it published them (None:
        one that could not be read)."""
        router = self.router_of(worker)
        if router is None or router.index is None:
            return
        if event is None:
            self.resync(worker)
        elif router.index.apply(worker, event) is Applied.GAP:
            log.info("worker %s: a gap in its KV events; resyncing", worker)
            self.resync(worker)

    def resync(self, worker: str) -> None:
        """Ask the worker for its snapshot (once at a time per worker)."""
        if worker not in self._resyncing:
            task = asyncio.get_running_loop().create_task(self._resync(worker))
            self._resyncing[worker] = task
            task.add_done_callback(lambda _: self._resyncing.pop(worker, None))

    async def _resync(self, worker: str) -> None:
        for _ in range(RESYNC_TRIES):
            router = self.router_of(worker)
            if router is None or router.index is None:
                return
            try:
                snapshot = await self.snapshots.snapshot(worker)
            except Exception as e:
                log.warning("worker %s: no KV snapshot (%s)", worker, e)
                continue
            self.resyncs += 1
            if router.index.resync(worker, snapshot):
                return
        log.warning("worker %s: its KV index could not be resynced", worker)
