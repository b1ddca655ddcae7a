"""KV tiers over NATS: a real `rotor worker out=mocker --host-kv-blocks N`
with a small device publishes on `rotor.kv.<id>` the blocks it evicts as
removed from the device and stored on the host, and brings them back up
(removed from the host, stored on the device) when their prompt comes again,
which a frontend's usage counts as cached; its snapshot
(`rotor.worker.<id>.kv`) lists the host's blocks under `lower`, and a
replica built from the snapshot and the events equals a later snapshot on
every medium; its `/metrics` count the host's blocks."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import nats as nats_py
import pytest

from rotor.protocol import codec
from rotor.protocol.kv import AllCleared, BlocksRemoved, BlocksStored, KVEvent, KVSnapshot
from rotor.runtime.nats import subjects

from support.cluster import Frontend, Nats, Worker, nats_server, start_frontend, start_worker
from support.wait import wait_for_async

pytestmark = pytest.mark.e2e

MODEL = "mock-model"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Nats, Frontend, Worker]]:
    with nats_server() as nats:
        worker = start_worker(
            nats,
            "out=mocker",
            "--speedup-ratio", "0",
            "--num-kv-blocks", "48",  # room for three of the prompts below
            "--host-kv-blocks", "512",
            system=True,
        )  # fmt: skip
        frontend = start_frontend(nats)
        try:
            frontend.wait_workers(MODEL, {worker.id})
            yield nats, frontend, worker
        finally:
            frontend.proc.stop()
            worker.proc.stop()


def ask(frontend: Frontend, topic: str) -> int:
    """One chat turn on a long system prompt of its own: its cached tokens."""
    system = f"You are an expert on {topic}. " + " ".join(f"{topic}-fact-{i}." for i in range(12))
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
        "max_tokens": 2,
    }
    r = httpx.post(frontend.v1 + "/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


class Replica:
    """A worker's blocks per medium, from a snapshot and the events after it."""

    def __init__(self, snap: KVSnapshot) -> None:
        self.last_id = snap.event_id
        self.media = {"device": dict(snap.blocks)} | {m: dict(b) for m, b in snap.lower.items()}

    def apply(self, event: KVEvent) -> None:
        if event.event_id <= self.last_id:
            return  # (already in the snapshot)
        assert event.event_id == self.last_id + 1
        self.last_id = event.event_id
        if isinstance(event, BlocksStored):
            held, parent = self.media.setdefault(event.medium, {}), event.parent_hash
            for h in event.block_hashes:
                held[h], parent = parent, h
        elif isinstance(event, BlocksRemoved):
            for h in event.block_hashes:
                del self.media[event.medium][h]
        else:
            assert isinstance(event, AllCleared)
            self.media = {}

    def held(self) -> dict[str, dict[int, int | None]]:
        return {m: blocks for m, blocks in self.media.items() if blocks}


async def test_a_prompt_moves_to_the_host_and_back_over_nats(
    cluster: tuple[Nats, Frontend, Worker],
) -> None:
    nats, frontend, worker = cluster
    nc = await nats_py.connect(nats.url)
    events: list[KVEvent] = []

    async def on_msg(msg: nats_py.aio.msg.Msg) -> None:
        events.extend(codec.decode_kv_events(msg.data))

    async def snapshot() -> KVSnapshot:
        reply = await nc.request(subjects.kv_snapshot(worker.id), b"", timeout=5)
        return codec.decode_kv_snapshot(reply.data)

    sub = await nc.subscribe(subjects.kv_events(worker.id), cb=on_msg)
    await nc.flush()
    try:
        replica = Replica(await snapshot())
        assert await asyncio.to_thread(ask, frontend, "ships") == 0
        for topic in ("bees", "clocks", "tides", "maps", "kites"):  # push ships off the device
            await asyncio.to_thread(ask, frontend, topic)
        moved = await snapshot()
        host = {h for h, _ in moved.lower["host"]}
        assert host, f"nothing moved to the host: {moved}"
        await wait_for_async(
            "the events up to the snapshot", lambda: _last(events) >= moved.event_id
        )

        # every block stored on the host had been removed from the device first
        gone_from_device: set[int] = set()
        for e in events:
            if isinstance(e, BlocksRemoved) and e.medium == "device":
                gone_from_device.update(e.block_hashes)
            if isinstance(e, BlocksStored) and e.medium == "host":
                assert set(e.block_hashes) <= gone_from_device
        before = len(events)

        cached = await asyncio.to_thread(ask, frontend, "ships")  # back from the host
        assert cached >= 16 * 8, "the host's blocks count as cached"
        await wait_for_async(
            "the move back up", lambda: any(_up(events[before:])), detail=lambda: events[before:]
        )
        up = next(_up(events[before:]))
        assert up  # blocks removed from the host, then stored on the device
        assert (
            await asyncio.to_thread(worker.metric, "rotor_engine_kv_host_loaded_blocks_total") > 0
        )
        assert await asyncio.to_thread(worker.metric, "rotor_engine_kv_host_blocks") > 0

        # the snapshot and the events tell one story, on every medium
        last = await snapshot()
        await wait_for_async(
            "the events up to the snapshot", lambda: _last(events) >= last.event_id
        )
        for event in events:
            if event.event_id <= last.event_id:
                replica.apply(event)
        expected = Replica(last)
        assert replica.last_id == expected.last_id
        assert replica.held() == expected.held()
        assert set(replica.held()) == {"device", "host"}
    finally:
        await sub.unsubscribe()
        await nc.close()


def _last(events: list[KVEvent]) -> int:
    return events[-1].event_id if events else 0


def _up(events: list[KVEvent]) -> Iterator[set[int]]:
    """Blocks a removal from the host names that the next device store stores."""
    for i, e in enumerate(events):
        if isinstance(e, BlocksRemoved) and e.medium == "host":
            for later in events[i + 1 :]:
                if isinstance(later, BlocksStored) and later.medium == "device":
                    both = set(e.block_hashes) & set(later.block_hashes)
                    if both:
                        yield both
                    break
