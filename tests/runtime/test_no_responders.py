"""A request to a worker nobody serves any more (runtime/nats/request_plane.py):
over a real nats-server, NATS answers "no responders" on the reply subject,
and the request's stream ends "unavailable" with cause worker_gone (what a
pool migrates), never as a broken stream message; the plane's owner hears
which worker is gone. Issue 40: a SIGKILLed worker's lease outlives it by
up to 5 s, and every request routed to it meanwhile was a 500."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import nats as nats_py
import pytest
from nats.errors import NoRespondersError

from rotor.protocol.engine import EngineError, pulled
from rotor.runtime.nats import subjects
from rotor.runtime.nats.request_plane import RequestPlane
from rotor.runtime.nats.worker import WorkerService

from support.cluster import Nats, nats_server
from support.mocker import TOK, MakeEngine, request


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
