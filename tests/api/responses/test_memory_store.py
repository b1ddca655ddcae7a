"""`--response-store memory` (api/responses/store.MemoryStore): records by
tenant and id, gone after the TTL, and a full store refuses the new record
(StoreUnavailable, a 503) instead of dropping old history to make room."""

from __future__ import annotations

import pytest

from rotor.api.responses.store import MemoryStore, StoreUnavailable

from support.clock import FakeClock


async def test_a_record_is_read_back_replaced_and_deleted() -> None:
    store = MemoryStore()
    await store.put("t", "resp_1", b"one")
    assert await store.get("t", "resp_1") == b"one"
    await store.put("t", "resp_1", b"two")
    assert await store.get("t", "resp_1") == b"two"
    assert await store.delete("t", "resp_1") is True
    assert await store.get("t", "resp_1") is None
    assert await store.delete("t", "resp_1") is False


async def test_another_tenant_finds_nothing() -> None:
    store = MemoryStore()
    await store.put("alice", "resp_1", b"hers")
    assert await store.get("bob", "resp_1") is None
    assert await store.delete("bob", "resp_1") is False
    assert await store.get("alice", "resp_1") == b"hers"


async def test_a_record_expires_after_the_ttl() -> None:
    clock = FakeClock(100.0)
    store = MemoryStore(ttl_s=10, clock=clock)
    await store.put("t", "old", b"x")
    clock.now += 5
    await store.put("t", "new", b"y")
    clock.now += 4.9
    assert await store.get("t", "old") == b"x"
    clock.now += 0.1  # old: 10 s after its put
    assert await store.get("t", "old") is None
    assert await store.get("t", "new") == b"y"
    assert await store.delete("t", "old") is False


@pytest.mark.parametrize("cap", [{"max_records": 2}, {"max_bytes": 8}])
async def test_a_full_store_refuses_and_keeps_every_record(cap: dict[str, int]) -> None:
    store = MemoryStore(**cap)
    await store.put("t", "a", b"1234")
    await store.put("t", "b", b"5678")
    with pytest.raises(StoreUnavailable, match="full"):
        await store.put("t", "c", b"9abc")
    assert await store.get("t", "a") == b"1234"  # never dropped to make room
    assert await store.get("t", "b") == b"5678"
    assert await store.get("t", "c") is None
    await store.put("t", "b", b"5")  # a replacement takes the old one's room
    assert await store.delete("t", "a")
    await store.put("t", "c", b"9abc")  # room again
    assert await store.get("t", "c") == b"9abc"


async def test_expired_records_make_room() -> None:
    clock = FakeClock()
    store = MemoryStore(ttl_s=10, max_bytes=8, clock=clock)
    await store.put("t", "a", b"12345678")
    with pytest.raises(StoreUnavailable):
        await store.put("t", "b", b"x")
    clock.now += 10
    await store.put("t", "b", b"x")
    assert await store.get("t", "b") == b"x"
