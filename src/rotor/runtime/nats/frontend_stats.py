"""A frontend's figures of the last second on NATS (`rotor.stats.<frontend>`),
for `rotor planner`: every frontend publishes its own, so a planner sees all
of them without being told where they are, and a frontend that starts or
goes away needs no configuration anywhere.

One msgpack message per second: `{"frontend", "at", "models": {model:
{"requests", "prompt_tokens", "completion_tokens", "ttft", "tpot",
"in_flight"}}}` (api/answers.py's period; `StatsFeed` reads it for planner/fleet.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import msgpack
from nats.aio.client import Client
from nats.aio.msg import Msg

from rotor.runtime.nats import subjects
from rotor.runtime.nats.subscriptions import Subscriptions

log = logging.getLogger("rotor.frontend")

PUBLISH_EVERY_S = 1.0

# (frontend id, its models' periods) -> None
OnStats = Callable[[str, dict[str, dict[str, Any]]], None]


def encode(frontend_id: str, models: dict[str, dict[str, Any]], at: float) -> bytes:
    return msgpack.packb({"frontend": frontend_id, "at": at, "models": models})


def decode(data: bytes) -> tuple[str, dict[str, dict[str, Any]]]:
    """(frontend id, models); ValueError for anything else."""
    try:
        m = msgpack.unpackb(data, raw=False)
        models = m["models"]
        if not isinstance(models, dict):
            raise TypeError("models is not a map")
        return str(m["frontend"]), models
    except (KeyError, TypeError, ValueError, msgpack.UnpackException) as e:
        raise ValueError(f"not frontend stats: {e}") from None


class StatsPublisher:
    def __init__(
        self,
        nc: Client,
        frontend_id: str,
        take: Callable[[], dict[str, dict[str, Any]]],
        every: float = PUBLISH_EVERY_S,
    ) -> None:
        """`take`: the models' periods since the last call (api/answers.Answers.take)."""
        self.nc = nc
        self.frontend_id = frontend_id
        self.take = take
        self.every = every
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._forever(), name="frontend-stats")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.publish()  # the last partial period: nothing the planner misses

    async def publish(self) -> None:
        models = self.take()
        if not models:
            return
        try:
            await self.nc.publish(
                subjects.frontend_stats(self.frontend_id),
                encode(self.frontend_id, models, time.time()),
            )
        except Exception as e:  # a closed connection: the period is lost, serving goes on
            log.debug("could not publish frontend stats: %s", e)

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            await self.publish()


class StatsFeed:
    """The planner's side: every frontend's stats message, decoded, to `on_stats`."""

    def __init__(self, nc: Client, on_stats: OnStats) -> None:
        self.on_stats = on_stats
        self._subs = Subscriptions(nc)

    async def start(self) -> None:
        await self._subs.add(subjects.STATS_PREFIX + "*", self._on_msg)

    async def stop(self) -> None:
        await self._subs.close()

    async def _on_msg(self, msg: Msg) -> None:
        try:
            frontend, models = decode(msg.data)
        except ValueError as e:
            log.warning("ignoring malformed frontend stats on %s: %s", msg.subject, e)
            return
        self.on_stats(frontend, models)
