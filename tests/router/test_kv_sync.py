"""KV sync (router/kv_sync.py): a lost KV event is seen as a gap and the
frontend's index resyncs from the worker's snapshot, until it holds exactly
what the worker's cache holds — over a real nats-server, with a worker
service and a mocker in this process."""

from __future__ import annotations

from collections.abc import Iterator

import nats as nats_py
import pytest

from rotor.protocol.kv import KVEvent
from rotor.router.kv import KVRouter
from rotor.router.kv_cost import KVCost
from rotor.router.kv_index import Applied
from rotor.router.kv_sync import KVSync
from rotor.runtime.nats.kv_events import KVEventFeed, KVSnapshots
from rotor.runtime.nats.worker import WorkerService

from support.cluster import Nats, nats_server
from support.mocker import TOK, collect, request
from support.wait import wait_for_async


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


async def test_a_gap_brings_a_resync_that_matches_the_cache(nats: Nats, make_engine) -> None:  # noqa: ANN001
    engine = await make_engine(block_size=4, num_kv_blocks=64)
    nc = await nats_py.connect(nats.url)
    service = WorkerService(nc, engine, TOK)
    await service.start()
    router = KVRouter(4, KVCost(4))
    watch = KVSync(KVSnapshots(nc), lambda w: router if w == service.worker_id else None)
    feed = KVEventFeed(nc, watch.on_event)
    assert router.index is not None
    dropped: list[KVEvent] = []
    real_apply = router.index.apply

    def lossy_apply(worker: str, event: KVEvent) -> Applied:
        if not dropped and watch.resyncs >= 1:
            dropped.append(event)  # this one is "lost on the wire"
            return Applied.APPLIED
        return real_apply(worker, event)

    router.index.apply = lossy_apply  # type: ignore[method-assign]
    await feed.start()
    try:
        watch.resync(service.worker_id)  # a worker that joins: its blocks so far
        wid = service.worker_id
        await wait_for_async("the first resync", lambda: watch.resyncs == 1)
        for i in range(6):
            prompt = f"<|im_start|>user\nprompt number {i} with some length to it<|im_end|>\n"
            await collect(engine, request({"output": f"answer {i}"}, prompt=prompt))
            await wait_for_async(
                "the index to match the cache",
                lambda: (
                    router.index.blocks_of(wid) == set(engine.scheduler.kv.hash_to_block)
                    and not router.index.awaiting_resync(wid)
                ),
            )
        assert dropped, "no event was dropped"
        assert watch.resyncs >= 2  # the join, and the gap
        assert router.index.blocks_of(wid) == set(engine.scheduler.kv.hash_to_block)
    finally:
        await feed.stop()
        await watch.stop()
        await service.stop()
        await nc.close()
