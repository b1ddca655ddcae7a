"""A worker acts on its canary (runtime/nats/worker.py), over a real
nats-server, its canary's clock moved by hand: the engine wedged (the
mocker's fault switch), the canary unanswered, its lease says unhealthy at
once, every request it holds ends "unavailable" with cause "unhealthy" —
for a frontend that takes batches and for one that takes a message per
output — and a new request is refused the same way (a frontend that
predates the lease's field moves it); once the wedge is off, a canary
answers and the lease says healthy again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgpack
import nats as nats_py
import pytest

from rotor.engines.mocker import MockerEngine
from rotor.protocol import codec
from rotor.protocol.engine import EngineError, EngineOutput, pulled
from rotor.protocol.lease import Lease
from rotor.runtime.canary import Canary, CanaryPolicy
from rotor.runtime.nats import messages as wire
from rotor.runtime.nats import subjects
from rotor.runtime.nats.request_plane import RequestPlane
from rotor.runtime.nats.worker import WorkerIdentity, WorkerService

from support.clock import FakeClock
from support.cluster import Nats, nats_server
from support.mocker import TOK, MakeEngine, request
from support.wait import wait_for_async

LONG = {"output": "".join(" a" for _ in range(5000)), "end": "length"}


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


class Leases:
    """The worker's leases as frontends hear them."""

    def __init__(self) -> None:
        self.seen: list[Lease] = []

    async def see(self, msg: Any) -> None:
        self.seen.append(Lease.decode(msg.data))


@pytest.fixture
async def served(nats: Nats, make_engine: MakeEngine) -> AsyncIterator[tuple]:
    """A worker of a mocker engine (a step per turn of the loop) with a
    canary on a fake clock that only the test moves, a frontend's request
    plane, and a connection that hears its leases."""
    conns = [await nats_py.connect(nats.url) for _ in range(3)]
    engine = await make_engine()
    identity = WorkerIdentity.new()
    clock = FakeClock(100.0)
    canary = Canary(engine, engine.card, CanaryPolicy(after=10, timeout=5), clock, "w")
    never = asyncio.Event()

    async def looks(seconds: float) -> None:  # the worker's own looks wait for ever
        await never.wait()

    canary.sleep = looks
    leases = Leases()
    await conns[2].subscribe(subjects.lease(identity.worker_id), cb=leases.see)
    worker = WorkerService(conns[0], engine, TOK, identity, canary=canary)
    await worker.start()
    plane = RequestPlane(conns[1])
    await plane.start()
    try:
        yield engine, worker, plane, clock, leases, conns[2]
    finally:
        await plane.stop()
        await worker.stop()
        for nc in conns:
            await nc.close()


async def test_a_wedged_engine_ends_its_requests_and_comes_back(served: tuple) -> None:
    engine, worker, plane, clock, leases, nc = served
    engine: MockerEngine
    # a frontend that takes batches, and one that takes a message per output
    batched = pulled(plane.generate(worker.worker_id, request(LONG), 30))
    assert (await batched.__anext__()).token_ids
    one_by_one: asyncio.Queue[bytes] = asyncio.Queue()
    inbox = nc.new_inbox()

    async def got(msg: Any) -> None:
        one_by_one.put_nowait(msg.data)

    await nc.subscribe(inbox, cb=got)
    await nc.publish(
        subjects.generate(worker.worker_id), codec.encode_request(request(LONG)), reply=inbox
    )
    assert wire.parse(await asyncio.wait_for(one_by_one.get(), 10))[1] == wire.OUTPUTS
    engine.wedge()  # the fault switch: no more steps; the event loop goes on
    for _ in range(5):
        await asyncio.sleep(0)
    steps = engine.state().steps
    await worker.check_health()  # the canary's look: its last step is now
    clock.now += 10
    await worker.check_health()
    assert worker.canary.waiting and worker.lease.healthy  # a canary is on its way
    clock.now += 5
    await worker.check_health()  # no answer: unhealthy
    assert not worker.lease.healthy and engine.state().steps == steps
    await wait_for_async(
        "the unhealthy lease", lambda: leases.seen and not leases.seen[-1].healthy, 10
    )
    with pytest.raises(EngineError) as e:
        async for _ in batched:
            pass
    assert (e.value.kind, e.value.cause) == ("unavailable", "unhealthy")
    while True:  # what it sent before, then its error
        _, kind, payload = wire.parse(await asyncio.wait_for(one_by_one.get(), 10))
        if kind != wire.OUTPUTS:
            break
    assert kind == wire.ERROR and codec.decode_error(payload or b"").cause == "unhealthy"
    await wait_for_async("its requests let go", lambda: not worker._serving, 10)
    refused = pulled(plane.generate(worker.worker_id, request({"output": "hi"}), 30))
    with pytest.raises(EngineError) as e:
        await refused.__anext__()
    assert e.value.cause == "unhealthy"
    engine.unwedge()  # the canary on its way is stepped now
    await wait_for_async("the canary's answer", lambda: worker.canary._probe.answer.answered, 10)
    await worker.check_health()
    assert worker.lease.healthy
    await wait_for_async("the healthy lease", lambda: leases.seen[-1].healthy, 10)
    outs: list[EngineOutput] = [
        out async for out in pulled(plane.generate(worker.worker_id, request({"output": "hi"}), 30))
    ]
    assert outs and worker.canary.failed >= 1
    assert msgpack.unpackb(leases.seen[-1].encode())["status"] == "serving"
