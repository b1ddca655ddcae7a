"""`rotor frontend`'s stored responses (runtime/nats/response_bucket.py)
against a real nats-server: one bucket that every frontend's connection
shares, tenants apart, a record of several MB in parts, and the 503 rule: a
full bucket, or a NATS that is gone, is StoreUnavailable (within the call's
bound, never a hang), and no record is dropped to make room."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Iterator

import nats as nats_py
import pytest
from nats.js.kv import VALID_KEY_RE

from rotor.protocol.response_store import StoreUnavailable
from rotor.runtime.nats.connect import connect
from rotor.runtime.nats.response_bucket import PLAIN_MAX, ResponseBucket, key_of

from support.cluster import Nats, nats_server
from support.wait import wait_for_async

_names = itertools.count()


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


@pytest.fixture
def bucket_name() -> str:
    """A bucket of the test's own on the module's server."""
    return f"responses_{next(_names)}"


@pytest.fixture
async def connections(nats: Nats) -> AsyncIterator[list[nats_py.NATS]]:
    """Two connections, as two frontends have."""
    ncs = [await nats_py.connect(nats.url) for _ in range(2)]
    try:
        yield ncs
    finally:
        for nc in ncs:
            await nc.close()


async def started(nc: nats_py.NATS, name: str, **options: float) -> ResponseBucket:
    bucket = ResponseBucket(
        ttl_s=options.pop("ttl_s", 3600),
        max_bytes=int(options.pop("max_bytes", 1 << 26)),
        bucket=name,
        **options,
    )
    await bucket.start(nc)
    return bucket


def test_keys_are_nats_keys_and_never_shared() -> None:
    ids = ["resp_1", "", "a.b", "a b", "ünï/cødé*>", "x" * PLAIN_MAX, "x" * (PLAIN_MAX + 1)]
    keys = {key_of(t, i) for t in ("", "3f2a", "a.b") for i in ids}
    assert len(keys) == 3 * len(ids)
    for key in keys:
        assert VALID_KEY_RE.match(key) and not key.startswith(".") and not key.endswith(".")
        assert len(key) < 300


async def test_a_record_put_through_one_connection_is_read_through_another(
    connections: list[nats_py.NATS], bucket_name: str
) -> None:
    one = await started(connections[0], bucket_name)
    two = await started(connections[1], bucket_name)
    await one.put("tenant", "resp_1", b"turn one")
    assert await two.get("tenant", "resp_1") == b"turn one"
    await two.put("tenant", "resp_1", b"turn two")
    assert await one.get("tenant", "resp_1") == b"turn two"
    assert await one.delete("tenant", "resp_1") is True
    assert await two.get("tenant", "resp_1") is None
    assert await two.delete("tenant", "resp_1") is False


async def test_another_tenant_finds_nothing(
    connections: list[nats_py.NATS], bucket_name: str
) -> None:
    store = await started(connections[0], bucket_name)
    await store.put("alice", "resp_1", b"hers")
    assert await store.get("bob", "resp_1") is None
    assert await store.delete("bob", "resp_1") is False
    await store.put("bob", "resp_1", b"his")
    assert await store.get("alice", "resp_1") == b"hers"
    assert await store.get("", "resp_1") is None  # no key at all: a tenant of its own


async def test_the_bucket_carries_the_ttl_and_the_cap(
    connections: list[nats_py.NATS], bucket_name: str
) -> None:
    await started(connections[0], bucket_name, ttl_s=60, max_bytes=123456)
    info = await connections[0].jetstream().stream_info(f"KV_{bucket_name}")
    assert info.config.max_age == 60
    assert info.config.max_bytes == 123456
    assert info.config.max_msgs_per_subject == 1


async def test_a_later_frontend_with_other_flags_uses_the_bucket_as_it_is(
    connections: list[nats_py.NATS], bucket_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = await started(connections[0], bucket_name, max_bytes=100000)
    await first.put("t", "resp_1", b"kept")
    with caplog.at_level(logging.WARNING, logger="rotor.runtime"):
        later = await started(connections[1], bucket_name, max_bytes=200000)
    assert "exists with other settings" in caplog.text
    assert await later.get("t", "resp_1") == b"kept"
    info = await connections[0].jetstream().stream_info(f"KV_{bucket_name}")
    assert info.config.max_bytes == 100000


async def test_a_full_bucket_refuses_and_keeps_every_record(
    connections: list[nats_py.NATS], bucket_name: str
) -> None:
    store = await started(connections[0], bucket_name, max_bytes=16 * 1024)
    kept = []
    with pytest.raises(StoreUnavailable, match="is full"):
        for n in range(100):
            await store.put("t", f"resp_{n}", bytes([n]) * 1000)
            kept.append(n)
    assert 5 < len(kept) < 16
    for n in kept:  # none dropped to make room
        assert await store.get("t", f"resp_{n}") == bytes([n]) * 1000
    assert await store.get("t", f"resp_{len(kept)}") is None
    assert await store.delete("t", "resp_0")  # a full bucket still deletes, which makes room
    await store.put("t", "resp_new", b"x" * 1000)
    assert await store.get("t", "resp_new") == b"x" * 1000


async def test_a_record_of_several_mb_goes_in_parts_and_comes_back_whole(
    connections: list[nats_py.NATS], bucket_name: str
) -> None:
    one = await started(connections[0], bucket_name)
    two = await started(connections[1], bucket_name)
    big = bytes(range(256)) * (5 * 4096 + 7)  # ~5 MiB: more than NATS's 1 MiB payload
    assert len(big) > 4 * connections[0].max_payload
    await one.put("t", "resp_big", big)
    assert await two.get("t", "resp_big") == big
    js = connections[0].jetstream()
    stream = f"KV_{bucket_name}"
    assert (await js.stream_info(stream)).state.messages > 5  # the head and its parts
    await two.put("t", "resp_big", big[::-1])  # replaced: the old parts are purged
    assert await one.get("t", "resp_big") == big[::-1]
    assert (await js.stream_info(stream)).state.bytes < 1.5 * len(big)
    await one.put("t", "resp_big", b"small now")
    assert await two.get("t", "resp_big") == b"small now"
    assert (await js.stream_info(stream)).state.messages == 1
    await two.put("t", "resp_big", big)
    assert await one.delete("t", "resp_big")
    assert await two.get("t", "resp_big") is None
    assert (await js.stream_info(stream)).state.messages == 0


async def test_a_record_that_does_not_fit_the_bucket_leaves_no_parts(
    connections: list[nats_py.NATS], bucket_name: str
) -> None:
    store = await started(connections[0], bucket_name, max_bytes=3 << 20)
    with pytest.raises(StoreUnavailable):
        await store.put("t", "resp_big", b"x" * (5 << 20))
    info = await connections[0].jetstream().stream_info(f"KV_{bucket_name}")
    assert info.state.messages == 0
    await store.put("t", "resp_small", b"fits")  # the room is there again
    assert await store.get("t", "resp_small") == b"fits"


async def test_before_nats_is_connected_the_store_is_unavailable() -> None:
    store = ResponseBucket(ttl_s=0, max_bytes=1 << 20)
    with pytest.raises(StoreUnavailable, match="not connected"):
        await store.get("t", "resp_1")


async def test_a_nats_that_is_gone_is_unavailable_within_the_bound() -> None:
    """The frontend's own connection (it reconnects forever) to a nats-server
    that is killed: each call fails within its timeout; once NATS is back
    (empty: a new store), the bucket is made again and calls work."""
    with nats_server() as server:
        nc = await connect(server.url, "test")
        try:
            store = await started(nc, "responses", timeout_s=1.0)
            await store.put("t", "resp_1", b"before")
            server.proc.kill()
            loop = asyncio.get_running_loop()
            for call in (
                store.get("t", "resp_1"),
                store.put("t", "resp_2", b"during"),
                store.put("t", "resp_3", b"x" * (3 << 20)),
                store.delete("t", "resp_1"),
            ):
                began = loop.time()
                with pytest.raises(StoreUnavailable, match="NATS"):
                    await call
                assert loop.time() - began < 3.0
            server.restart()
            await wait_for_async("a reconnection", lambda: nc.is_connected, timeout=15)
            await store.put("t", "resp_4", b"after")
            assert await store.get("t", "resp_4") == b"after"
        finally:
            await nc.close()
