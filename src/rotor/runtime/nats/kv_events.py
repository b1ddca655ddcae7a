"""Workers' KV events as NATS carries them, for a frontend's KV index
(router/kv_sync.py applies them).

`KVEventFeed` hands each event published on `rotor.kv.<worker>` (a
message holds one, or a step's several) to `on_event(worker, event)`, decoded; an event this frontend cannot read is
handed on as None (the index must resync that worker). `KVSnapshots` asks a
worker for its snapshot (`rotor.worker.<id>.kv`, request/reply).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg

from rotor.protocol import codec
from rotor.protocol.kv import KVEvent, KVSnapshot
from rotor.runtime.nats import subjects
from rotor.runtime.nats.subscriptions import Subscriptions

log = logging.getLogger("rotor.kv_events")

SNAPSHOT_TIMEOUT_S = 5.0

OnEvent = Callable[[str, "KVEvent | None"], None]


class KVEventFeed:
    def __init__(self, nc: Client, on_event: OnEvent) -> None:
        self.nc = nc
        self.on_event = on_event
        self._subs = Subscriptions(nc)

    async def start(self) -> None:
        await self._subs.add(subjects.KV_PREFIX + "*", self._on_msg)

    async def stop(self) -> None:
        await self._subs.close()

    async def _on_msg(self, msg: Msg) -> None:
        """One message: an event, or (a worker's step) several, in order."""
        worker = msg.subject.rsplit(".", 1)[-1]
        try:
            events: list[KVEvent | None] = list(codec.decode_kv_events(msg.data))
        except codec.CodecError as e:
            log.warning("worker %s sent a KV event this frontend cannot read (%s)", worker, e)
            events = [None]
        for event in events:
            self.on_event(worker, event)


class KVSnapshots:
    """Workers' KV snapshots, on request."""

    def __init__(self, nc: Client, timeout: float = SNAPSHOT_TIMEOUT_S) -> None:
        self.nc = nc
        self.timeout = timeout

    async def snapshot(self, worker: str) -> KVSnapshot:
        reply = await self.nc.request(subjects.kv_snapshot(worker), b"", timeout=self.timeout)
        return codec.decode_kv_snapshot(reply.data)
