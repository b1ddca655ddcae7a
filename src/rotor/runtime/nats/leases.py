"""Workers' leases and cards as NATS carries them, for a frontend's discovery
(router/discovery.py decides what they mean).

`LeaseFeed` hands every lease to `on_lease`: first those in the workers
bucket (workers that were there before this frontend), then each renewal or
withdrawal as it is published on `rotor.lease.>`. `CardStore` fetches a
model's card (with its tokenizer) from the object store by its hash.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg

from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol import codec
from rotor.protocol.lease import Lease
from rotor.runtime.nats import subjects
from rotor.runtime.nats.subscriptions import Subscriptions

log = logging.getLogger("rotor.discovery")

OnLease = Callable[[Lease], Awaitable[None]]


class LeaseFeed:
    def __init__(self, nc: Client, on_lease: OnLease) -> None:
        self.nc = nc
        self.on_lease = on_lease
        self._subs = Subscriptions(nc)

    async def start(self) -> None:
        await self._subs.add(subjects.LEASE_PREFIX + "*", self._on_msg)
        await self._read_bucket()

    async def stop(self) -> None:
        await self._subs.close()

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


class CardStore:
    """The cards workers stored, by content hash."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc

    async def fetch(self, lease: Lease) -> tuple[ModelCard, Tokenizer | None]:
        store = await self.nc.jetstream().object_store(subjects.CARDS_STORE)
        result = await store.get(lease.card)
        return codec.decode_card(result.data or b"")
