"""A transport's stream read by push (runtime/stream.py's Reading.deliver)
and a pool's (router/pool.py's PoolStream): what a pushed reader gets is
what a pulled one gets — every token of every choice and the same end —
whatever messages come (gaps, repeats, errors) in whatever turns; the
silence limit still holds without a waiting reader; and a worker that
fails under a pushed stream is migrated, the reader seeing one answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.model.card import ModelCard
from rotor.protocol.engine import RESUME_FROM, EngineError, EngineOutput, EngineRequest, EngineState
from rotor.protocol.lease import Lease
from rotor.router.modes import RoundRobin
from rotor.router.pool import Pool
from rotor.runtime.stream import OutputStream

from support.clock import FakeClock
from support.wait import wait_for_async

TIMEOUT_S = 10  # a guard against a hang: what the tests wait for takes a few turns of the loop


class Delivery:
    def __init__(self) -> None:
        self.outputs_: list[EngineOutput] = []
        self.end: Any = "open"

    def outputs(self, outputs: list[EngineOutput]) -> bool:
        self.outputs_ += outputs
        return True

    def ended(self, error: EngineError | None) -> None:
        self.end = error.message if error is not None else None


async def _nothing() -> None:
    pass


# A message: (seq offset from the next expected, kind, tokens)
messages = st.lists(
    st.tuples(
        st.sampled_from([0, 0, 0, 0, 1, -1]),  # mostly in order; a gap, a repeat
        st.sampled_from(["outputs", "outputs", "outputs", "heartbeat", "done", "error"]),
        st.lists(st.integers(1, 50), min_size=1, max_size=3),
        st.integers(0, 1),  # the choice
        st.booleans(),  # a turn ends after it
    ),
    min_size=1,
    max_size=25,
)


def _feed(stream: OutputStream, plan: list[tuple]) -> list[tuple]:
    """The messages of `plan` as (seq, kind, payload), turn by turn."""
    out, seq = [], 0
    for offset, kind, ids, index, _ in plan:
        s = max(0, seq + offset)
        if kind == "outputs":
            payload: Any = [EngineOutput(index=index, token_ids=list(ids))]
        elif kind == "error":
            payload = EngineError("the engine broke", "internal")
        else:
            payload = None
        out.append((s, kind, payload))
        if offset == 0:
            seq += 1
    return out


async def _pulled(plan: list[tuple]) -> tuple[dict[int, list[int]], Any]:
    stream = OutputStream(2, "w", abort=lambda: None)
    reading = stream.read(_nothing)
    got: dict[int, list[int]] = {0: [], 1: []}
    for seq, kind, payload in _feed(stream, plan):
        stream.put(seq, kind, payload)
    stream.put(10_000, "done", None)  # a stream that never ended ends with a gap here
    try:
        async for out in reading:
            got[out.index] += out.token_ids
    except EngineError as e:
        return got, e.message
    return got, None


async def _pushed(plan: list[tuple]) -> tuple[dict[int, list[int]], Any]:
    stream = OutputStream(2, "w", abort=lambda: None)
    reading = stream.read(_nothing)
    fed = _feed(stream, plan) + [(10_000, "done", None)]
    turns = [step[4] for step in plan] + [True]
    got: dict[int, list[int]] = {0: [], 1: []}
    first = asyncio.ensure_future(reading.__anext__())  # pulled until its first output
    i = 0
    while not first.done():
        stream.put(*fed[i])
        i += 1
        await asyncio.sleep(0)
    try:
        out = first.result()
    except StopAsyncIteration:
        return got, None
    except EngineError as e:
        return got, e.message
    got[out.index] += out.token_ids
    delivery = Delivery()
    reading.deliver(delivery)
    for item, turn_ends in zip(fed[i:], turns[i:], strict=True):
        stream.put(*item)
        if turn_ends:
            await asyncio.sleep(0)
    for _ in range(3):
        await asyncio.sleep(0)
    for out in delivery.outputs_:
        got[out.index] += out.token_ids
    assert delivery.end != "open"
    return got, delivery.end


@settings(max_examples=300, deadline=None)
@given(messages)
def test_a_pushed_reading_gets_what_a_pulled_one_gets(plan: list[tuple]) -> None:
    assert asyncio.run(_pushed(plan)) == asyncio.run(_pulled(plan))


async def test_the_silence_limit_holds_without_a_waiting_reader() -> None:
    clock = FakeClock(100.0)
    stream = OutputStream(1, "worker w", abort=lambda: None, silence=4.0, clock=clock)
    reading = stream.read(_nothing)
    stream.put(0, "outputs", [EngineOutput(token_ids=[1])])
    assert (await reading.__anext__()).token_ids == [1]
    delivery = Delivery()
    reading.deliver(delivery)
    clock.now += 3
    reading._check()  # the reading's own timer, fired by hand on the injected clock
    assert delivery.end == "open"
    clock.now += 2
    reading._check()
    await asyncio.sleep(0)  # the failure reaches the reader at the turn's end
    assert delivery.end == "worker w stopped answering"


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
