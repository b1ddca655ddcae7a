"""A model's pool of workers (router/pool.py): no live worker is an
unavailable error, counted; and a worker that fails under a pushed pool
stream (its PoolStream) is migrated, the reader seeing one answer, or the
migration ends when the reader leaves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rotor.model.card import ModelCard
from rotor.protocol.engine import RESUME_FROM, EngineError, EngineOutput, EngineRequest, EngineState
from rotor.protocol.lease import Lease
from rotor.router.modes import RoundRobin
from rotor.router.pool import Pool
from rotor.runtime.stream import OutputStream

from support.delivery import Delivery
from support.wait import wait_for_async
from support.workers import FakeInbox

TIMEOUT_S = 10  # a guard against a hang: what the tests wait for takes a few turns of the loop


async def test_no_live_worker_is_unavailable_and_counted() -> None:
    pool = Pool(ModelCard("m"), FakeInbox(), RoundRobin())  # type: ignore[arg-type]
    stream: Any = pool.generate(EngineRequest("r", "m", [1]))
    with pytest.raises(EngineError, match="no live worker") as e:
        await stream.__anext__()
    assert e.value.kind == "unavailable" and pool.stats.no_worker == 1


async def _nothing() -> None:
    pass


class Link:
    """Workers whose streams the test feeds: `streams[worker]` once asked."""

    def __init__(self) -> None:
        self.streams: dict[str, OutputStream] = {}
        self.asked: list[tuple[str, EngineRequest]] = []
        self.aborted: list[str] = []

    def generate(
        self, worker_id: str, request: EngineRequest, timeout: float, headers: object = None
    ) -> AsyncIterator[EngineOutput]:
        stream = self.streams[worker_id] = OutputStream(
            1, worker_id, abort=lambda: self.aborted.append(worker_id)
        )
        self.asked.append((worker_id, request))
        return stream.read(_nothing)

    def worker_gone(self, worker_id: str) -> None:
        pass

    def release_kv(self, worker_id: str, transfer_id: str) -> None:
        pass


async def _pushed_pool_stream(
    workers: tuple[str, ...], migrations: int
) -> tuple[Link, Pool, Any, str, Delivery]:
    """A pool's stream of one request, its first output ([10]) read from
    the first worker asked, the rest pushed to a Delivery from then on."""
    link = Link()
    pool = Pool(ModelCard("m"), link, RoundRobin(), migration_limit=migrations)
    for wid in workers:
        pool.upsert(Lease(wid, "m", "card", "compat", "host:1", state=EngineState()))
    stream = pool.generate(EngineRequest("r", "m", [1, 2, 3]))
    pull = asyncio.ensure_future(stream.__anext__())
    await wait_for_async("a worker asked", lambda: bool(link.streams), TIMEOUT_S, pause=0)
    first = link.asked[0][0]
    link.streams[first].put(0, "outputs", [EngineOutput(token_ids=[10])])
    assert (await pull).token_ids == [10]
    assert stream.pushable
    delivery = Delivery()
    stream.deliver(delivery)
    return link, pool, stream, first, delivery


async def test_a_pushed_pool_stream_migrates_and_the_reader_sees_one_answer() -> None:
    link, pool, _stream, first_worker, delivery = await _pushed_pool_stream(("a", "b"), 2)
    link.streams[first_worker].put(1, "outputs", [EngineOutput(token_ids=[11, 12])])
    await asyncio.sleep(0)
    link.streams[first_worker].fail(EngineError("gone", "unavailable", cause="worker_gone"))
    # the migration runs in a task of its own
    await wait_for_async("a second worker asked", lambda: len(link.asked) == 2, TIMEOUT_S, pause=0)
    other, resumed = link.asked[1]
    assert other != first_worker
    assert resumed.annotations[RESUME_FROM] == 3 and resumed.token_ids == [1, 2, 3, 10, 11, 12]
    link.streams[other].put(0, "outputs", [EngineOutput(token_ids=[13], finish="length")])
    link.streams[other].put(1, "done", None)
    await wait_for_async("the delivery ended", lambda: delivery.end != "open", TIMEOUT_S, pause=0)
    assert [t for o in delivery.outputs_ for t in o.token_ids] == [11, 12, 13]
    assert delivery.end is None
    assert pool.stats.migrations == {"worker_gone": 1}


async def test_a_reader_that_leaves_mid_migration_ends_the_migration() -> None:
    link, pool, stream, first, _delivery = await _pushed_pool_stream(("a", "b", "c"), 3)
    link.streams[first].fail(EngineError("gone", "unavailable", cause="worker_gone"))
    # the migration runs in a task of its own
    await wait_for_async("a second worker asked", lambda: len(link.asked) == 2, TIMEOUT_S, pause=0)
    second = link.asked[1][0]
    stream.stop()  # the client leaves while the new attempt is read
    await wait_for_async(
        "the second worker told", lambda: second in link.aborted, TIMEOUT_S, pause=0
    )
    assert second in link.aborted  # the new attempt's worker is told at once
    # the migration's task is cancelled in a turn of its own: the pool lets go of the attempt
    await wait_for_async("the pool to let go", lambda: not pool.load.in_flight, TIMEOUT_S, pause=0)
    with pytest.raises(StopAsyncIteration):  # and the pool's generator is over: no more attempts
        await stream.__anext__()
    assert [w for w, _ in link.asked] == [first, second]
