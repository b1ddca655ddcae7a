"""The subscriptions a component holds, ended together: unsubscribing when
NATS is already gone is no error (the subscription went with it)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription


class Subscriptions:
    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self._subs: list[Subscription] = []

    async def add(self, subject: str, cb: Callable[[Msg], Awaitable[None]]) -> None:
        self._subs.append(await self.nc.subscribe(subject, cb=cb))

    async def close(self) -> None:
        subs, self._subs = self._subs, []
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
