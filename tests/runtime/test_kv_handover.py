"""The mocker's KV handover between two worker services over a real
nats-server (both in this process, each with its own connection): a decode
worker's fetch is a request/reply on the prefill worker's kv_fetch subject
that unpins what it hands over, the frontend's release-only publish frees a
hold nobody will fetch, and a prefill worker that is gone makes the decode
worker compute the prompt itself (or refuse, when enforced)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace

import msgpack
import nats as nats_py
import pytest
from nats.aio.client import Client

from rotor.engines.mocker import MockerEngine
from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    EngineError,
    EngineOutput,
    EngineRequest,
    StopParams,
    pulled,
)
from rotor.runtime.nats import subjects
from rotor.runtime.nats.request_plane import RequestPlane
from rotor.runtime.nats.worker import WorkerService

from support.cluster import Nats, nats_server
from support.mocker import TOK, MakeEngine, collect, ids_of, request
from support.wait import wait_for_async

LONG = "<|im_start|>user\n" + " ".join(f"note-{i}." for i in range(60)) + "<|im_end|>\n"
STORY = " ".join(f"word{i}" for i in range(20))


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


@dataclass
class Pair:
    prefill: MockerEngine
    decode: MockerEngine
    prefill_worker: WorkerService
    decode_worker: WorkerService
    plane: RequestPlane  # the frontend's side
    nc: Client


@pytest.fixture
async def pair(nats: Nats, make_engine: MakeEngine) -> AsyncIterator[Pair]:
    conns = [await nats_py.connect(nats.url) for _ in range(3)]
    prefill, decode = await make_engine(), await make_engine()
    services = [
        WorkerService(conns[0], prefill, TOK, role="prefill"),
        WorkerService(conns[1], decode, TOK, role="decode"),
    ]
    for service in services:
        await service.start()
    plane = RequestPlane(conns[2])
    await plane.start()
    try:
        yield Pair(prefill, decode, *services, plane, conns[2])
    finally:
        await plane.stop()
        for service in services:
            await service.stop()
        for nc in conns:
            await nc.close()


async def remote(plane: RequestPlane, worker: str, job: EngineRequest) -> list[EngineOutput]:
    return [out async for out in pulled(plane.generate(worker, job, 30))]


async def prefill_over_nats(pair: Pair, prompt: str = LONG) -> tuple[EngineOutput, EngineRequest]:
    """The frontend's first stage on the prefill worker: its one output, and
    the decode request it makes of it."""
    job = request({"output": STORY}, prompt=prompt, stop=StopParams(max_tokens=1))
    job.annotations[PREFILL_ONLY] = True
    (first,) = await remote(pair.plane, pair.prefill_worker.worker_id, job)
    assert first.kv_transfer is not None and len(first.token_ids) == 1
    rest = request({"output": STORY}, prompt=prompt, stop=StopParams(max_tokens=100))
    rest = replace(rest, token_ids=rest.token_ids + first.token_ids)
    transfer = {**first.kv_transfer, "worker": pair.prefill_worker.worker_id}
    rest.annotations.update({"resume_from": 1, KV_TRANSFER: transfer})
    return first, rest


async def test_a_decode_worker_fetches_the_pinned_blocks_over_nats(pair: Pair) -> None:
    first, rest = await prefill_over_nats(pair)
    hashes = rest.annotations[KV_TRANSFER]["block_hashes"]
    assert pair.prefill.state().kv_blocks_pinned == len(hashes) > 10
    outs = await remote(pair.plane, pair.decode_worker.worker_id, rest)
    whole = await collect(pair.prefill, request({"output": STORY}, prompt=LONG))
    assert first.token_ids + ids_of(outs) == ids_of(whole)
    assert pair.prefill.state().kv_blocks_pinned == 0  # handed over: unpinned
    assert pair.decode.state().kv_blocks_fetched == len(hashes)
    assert pair.decode.state().kv_fetch_failures == 0
    assert all(h in pair.decode.scheduler.kv.hash_to_block for h in hashes)


async def test_kv_fetch_answers_what_it_handed_over_once(pair: Pair) -> None:
    _, rest = await prefill_over_nats(pair)
    transfer = rest.annotations[KV_TRANSFER]
    subject = subjects.kv_fetch(pair.prefill_worker.worker_id)
    ask = {"transfer_id": transfer["transfer_id"], "hashes": transfer["block_hashes"][:3]}
    reply = await pair.nc.request(subject, msgpack.packb(ask), timeout=5)
    assert msgpack.unpackb(reply.data) == {"hashes": transfer["block_hashes"][:3]}
    assert pair.prefill.state().kv_blocks_pinned == 0  # any fetch ends the whole hold
    reply = await pair.nc.request(subject, msgpack.packb(ask), timeout=5)
    assert msgpack.unpackb(reply.data) == {"hashes": []}  # already handed over
    reply = await pair.nc.request(subject, b"\xc1 not msgpack", timeout=5)
    assert msgpack.unpackb(reply.data) == {"hashes": []}


async def test_the_frontends_release_frees_a_hold_nobody_will_fetch(pair: Pair) -> None:
    _, rest = await prefill_over_nats(pair)
    assert pair.prefill.state().kv_blocks_pinned > 0
    pair.plane.release_kv(
        pair.prefill_worker.worker_id, rest.annotations[KV_TRANSFER]["transfer_id"]
    )
    await wait_for_async(
        "the hold to be released", lambda: pair.prefill.state().kv_blocks_pinned == 0
    )
    assert pair.prefill.state().kv_hold_timeouts == 0  # released, not expired


async def test_a_prefill_worker_gone_is_computed_on_the_decode_worker(pair: Pair) -> None:
    first, rest = await prefill_over_nats(pair)
    _, enforced = await prefill_over_nats(pair, LONG.replace("note", "memo"))
    enforced.annotations[KV_TRANSFER]["enforce"] = True
    await pair.prefill_worker.stop()  # its kv_fetch subscription goes with it
    outs = await remote(pair.plane, pair.decode_worker.worker_id, rest)
    whole = await collect(pair.prefill, request({"output": STORY}, prompt=LONG))
    assert first.token_ids + ids_of(outs) == ids_of(whole)
    state = pair.decode.state()
    assert (state.kv_fetch_failures, state.kv_blocks_fetched) == (1, 0)
    with pytest.raises(EngineError) as e:
        await remote(pair.plane, pair.decode_worker.worker_id, enforced)
    assert e.value.cause == "kv_transfer"
    assert pair.decode.state().kv_fetch_failures == 2
