"""The frontend's copy of every worker's KV blocks, kept by following the
workers' KV events (`rotor.kv.<worker>`). A worker that joins, or a gap in
its event ids (an event lost, a frontend restarted), brings a resync: the
worker's snapshot, asked for on `rotor.worker.<id>.kv`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg

from rotor.protocol import codec
from rotor.router.kv import KVRouter
from rotor.router.kv_index import Applied
from rotor.runtime import subjects

log = logging.getLogger("rotor.kv_watch")

RESYNC_TIMEOUT_S = 5.0
RESYNC_TRIES = 3


class KVWatch:
    def __init__(self, nc: Client, router_of: Callable[[str], KVRouter | None]) -> None:
        """`router_of(worker)`: the kv router of the worker's pool, or None."""
        self.nc = nc
        self.router_of = router_of
        self.resyncs = 0
        self._sub = None
        self._resyncing: dict[str, asyncio.Task[None]] = {}

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(subjects.KV_PREFIX + "*", cb=self._on_msg)

    async def stop(self) -> None:
        for task in self._resyncing.values():
            task.cancel()
        await asyncio.gather(*self._resyncing.values(), return_exceptions=True)
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:
                pass

    async def _on_msg(self, msg: Msg) -> None:
        worker = msg.subject.rsplit(".", 1)[-1]
        router = self.router_of(worker)
        if router is None or router.index is None:
            return
        try:
            event = codec.decode_kv_event(msg.data)
        except codec.CodecError as e:
            log.warning("worker %s sent a KV event this frontend cannot read (%s)", worker, e)
            self.resync(worker)
            return
        if router.index.apply(worker, event) is Applied.GAP:
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
                reply = await self.nc.request(
                    subjects.kv_snapshot(worker), b"", timeout=RESYNC_TIMEOUT_S
                )
                snapshot = codec.decode_kv_snapshot(reply.data)
            except Exception as e:
                log.warning("worker %s: no KV snapshot (%s)", worker, e)
                continue
            self.resyncs += 1
            if router.index.resync(worker, snapshot):
                return
        log.warning("worker %s: its KV index could not be resynced", worker)
