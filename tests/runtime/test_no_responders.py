"""A request to a worker nobody serves any more (runtime/nats/request_plane.py):
over a real nats-server, NATS answers "no responders" on the reply subject,
and the request's stream ends "unavailable" with cause worker_gone (what a
pool migrates), never as a broken stream message; the plane's owner hears
which worker is gone. Issue 40: a SIGKILLed worker's lease outlives it by
up to 5 s, and every request routed to it meanwhile was a 500. While NATS
comes back (a restarted server), a worker that has not reconnected yet is
waited for, not taken for gone."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import nats as nats_py
import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from rotor.protocol.engine import EngineError, EngineOutput, pulled
from rotor.runtime.nats import subjects
from rotor.runtime.nats.connect import connect
from rotor.runtime.nats.request_plane import RequestPlane
from rotor.runtime.nats.worker import WorkerIdentity, WorkerService

from support.cluster import Nats, nats_server
from support.mocker import TOK, MakeEngine, request
from support.wait import wait_for_async


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


@pytest.fixture
async def plane(nats: Nats) -> AsyncIterator[tuple[RequestPlane, list[str]]]:
    """A frontend's request plane, and the workers it said were gone."""
    nc = await nats_py.connect(nats.url)
    gone: list[str] = []
    plane = RequestPlane(nc, on_gone=gone.append)
    await plane.start()
    try:
        yield plane, gone
    finally:
        await plane.stop()
        await nc.close()


async def gone_from_nats(nc: nats_py.NATS, worker_id: str) -> None:
    """Until the server has dropped the worker's subscriptions (its connection
    closes apart from ours: a request sent the moment before may still reach
    it, and get no answer at all)."""
    for _ in range(200):
        try:
            await nc.request(subjects.generate(worker_id), b"", timeout=0.5)
        except NoRespondersError:
            return
        except TimeoutError:
            pass
        await asyncio.sleep(0.02)
    raise AssertionError(f"worker {worker_id} still subscribed")


async def test_a_request_to_a_worker_that_left_nats_is_unavailable_worker_gone(
    nats: Nats, plane: tuple[RequestPlane, list[str]], make_engine: MakeEngine
) -> None:
    requests, gone = plane
    nc = await nats_py.connect(nats.url)
    worker = WorkerService(nc, await make_engine(), TOK)
    await worker.start()
    try:
        answer = [o async for o in pulled(requests.generate(worker.worker_id, request(), 30))]
        assert answer and gone == []  # served while it is there
    finally:
        await worker.stop()  # its subscriptions end, as a killed worker's do
        await nc.close()
    await gone_from_nats(requests.nc, worker.worker_id)
    with pytest.raises(EngineError) as e:
        [o async for o in pulled(requests.generate(worker.worker_id, request(), 30))]
    assert e.value.kind == "unavailable" and e.value.cause == "worker_gone"
    assert "no responders" in e.value.message
    assert gone == [worker.worker_id]


async def test_embeddings_of_a_worker_nobody_serves_say_it_is_gone(
    plane: tuple[RequestPlane, list[str]],
) -> None:
    requests, gone = plane
    with pytest.raises(EngineError) as e:
        await requests.embed("nobody", [[1, 2, 3]], None, 4, 5)
    assert e.value.kind == "unavailable" and e.value.cause == "worker_gone"
    assert gone == ["nobody"]


@asynccontextmanager
async def restarted_nats(
    grace: float,
) -> AsyncIterator[tuple[Nats, RequestPlane, list[str]]]:
    """A nats-server of its own, a frontend's request plane on it (its
    reconnect grace `grace`), and the workers the plane said were gone:
    yielded once the server has restarted and the plane's connection is back."""
    with nats_server() as nats:
        nc = await connect(nats.url, "frontend")
        gone: list[str] = []
        plane = RequestPlane(nc, on_gone=gone.append, reconnect_grace=grace, resend_after=0.05)
        await plane.start()
        try:
            nats.restart()
            await wait_for_async(
                "the plane's connection to come back",
                lambda: nc.is_connected and nc.stats["reconnects"] >= 1,
                30,
            )
            yield nats, plane, gone
        finally:
            await plane.stop()
            await nc.close()


async def test_while_nats_comes_back_a_worker_not_reconnected_yet_is_waited_for(
    make_engine: MakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """A restarted nats-server: this frontend is back before the worker is.
    Its request finds nobody, is sent again until the worker is back, and
    is answered there; the worker is not taken for gone."""
    caplog.set_level(logging.DEBUG, logger="rotor.request_plane")
    identity = WorkerIdentity.new()
    async with restarted_nats(grace=30) as (nats, plane, gone):
        reading = asyncio.create_task(collect_from(plane, identity.worker_id))
        await wait_for_async(
            "the request to find nobody", lambda: "not back on NATS yet" in caplog.text, 10
        )
        nc = await nats_py.connect(nats.url)
        worker = WorkerService(nc, await make_engine(), TOK, identity)
        await worker.start()  # the worker is back
        try:
            assert await asyncio.wait_for(reading, 30)
        finally:
            await worker.stop()
            await nc.close()
        assert gone == []


async def test_once_nats_is_back_a_worker_that_is_not_is_gone() -> None:
    async with restarted_nats(grace=0) as (_, plane, gone):
        with pytest.raises(EngineError) as e:
            await collect_from(plane, "never-came-back")
        assert e.value.cause == "worker_gone"
        assert gone == ["never-came-back"]


async def collect_from(plane: RequestPlane, worker_id: str) -> list[EngineOutput]:
    return [o async for o in pulled(plane.generate(worker_id, request(), 30))]


async def test_when_the_plane_s_connection_comes_back_its_streams_end_unavailable_at_once() -> None:
    """Messages a worker sent while this frontend was away from NATS are lost:
    a stream whose end was among them would hear nothing until its silence
    limit (4 s). When the connection comes back, the streams sent before end
    "unavailable" (a pool moves them) at once."""
    with nats_server() as nats:
        planes: list[RequestPlane] = []

        async def reconnected() -> None:
            planes[0].reconnected()

        nc = await connect(nats.url, "frontend", reconnected)
        plane = RequestPlane(nc)
        planes.append(plane)
        await plane.start()
        quiet = await nats_py.connect(nats.url)  # a worker that takes requests and says nothing
        taken: list[str] = []

        async def take(msg: Msg) -> None:
            taken.append(msg.subject)

        await quiet.subscribe(subjects.generate("quiet"), cb=take)
        await quiet.flush()  # the server has the subscription
        try:
            reading = asyncio.create_task(collect_from(plane, "quiet"))
            await wait_for_async("the request to be taken", lambda: bool(taken), 10)
            nats.restart()
            with pytest.raises(EngineError) as e:
                await asyncio.wait_for(reading, 30)
            assert e.value.kind == "unavailable"
            assert "NATS connection came back" in e.value.message  # not "stopped answering"
        finally:
            await plane.stop()
            await nc.close()
            await quiet.close()
