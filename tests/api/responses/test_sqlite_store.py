"""`--response-store PATH` (api/responses/sqlite_store.SQLiteStore), `rotor
run`'s default: records in one SQLite file that several stores (processes)
share, by tenant and id, gone after the TTL (an injected wall clock), and a
full file refuses the new record (StoreUnavailable, a 503) and keeps the old."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from rotor.api.responses.sqlite_store import SQLiteStore
from rotor.api.responses.store import StoreUnavailable

from support.clock import FakeClock


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "rotor" / "responses.sqlite3"


async def test_a_record_is_read_back_replaced_and_deleted(path: Path) -> None:
    store = SQLiteStore(path)
    try:
        await store.put("t", "resp_1", b"one")
        assert await store.get("t", "resp_1") == b"one"
        await store.put("t", "resp_1", b"two")
        assert await store.get("t", "resp_1") == b"two"
        assert await store.delete("t", "resp_1") is True
        assert await store.get("t", "resp_1") is None
        assert await store.delete("t", "resp_1") is False
    finally:
        await store.close()


async def test_the_file_and_its_folder_are_the_owners_alone(path: Path) -> None:
    store = SQLiteStore(path)
    await store.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_two_stores_on_one_file_see_each_others_records(path: Path) -> None:
    """What two processes (--http-workers, a restarted server) do: the same file."""
    one, two = SQLiteStore(path), SQLiteStore(path)
    try:
        await one.put("t", "resp_1", b"from one")
        assert await two.get("t", "resp_1") == b"from one"
        await two.put("t", "resp_1", b"from two")
        assert await one.get("t", "resp_1") == b"from two"
        assert await one.delete("t", "resp_1")
        assert await two.get("t", "resp_1") is None
    finally:
        await one.close()
        await two.close()
    again = SQLiteStore(path)  # and a store opened later
    try:
        assert await again.get("t", "resp_1") is None
    finally:
        await again.close()


async def test_another_tenant_finds_nothing(path: Path) -> None:
    store = SQLiteStore(path)
    try:
        await store.put("alice", "resp_1", b"hers")
        await store.put("bob", "resp_2", b"his")
        assert await store.get("bob", "resp_1") is None
        assert await store.delete("bob", "resp_1") is False
        assert await store.get("alice", "resp_1") == b"hers"
        await store.put("bob", "resp_1", b"his own")  # the same id, another tenant's record
        assert await store.get("alice", "resp_1") == b"hers"
        assert await store.get("bob", "resp_1") == b"his own"
    finally:
        await store.close()


async def test_a_record_expires_after_the_ttl(path: Path) -> None:
    clock = FakeClock(1_000_000.0)
    store = SQLiteStore(path, ttl_s=10, clock=clock)
    try:
        await store.put("t", "old", b"x")
        clock.now += 9.9
        assert await store.get("t", "old") == b"x"
        clock.now += 0.1
        assert await store.get("t", "old") is None
        assert await store.delete("t", "old") is False
    finally:
        await store.close()


async def test_ttl_zero_keeps_records(path: Path) -> None:
    clock = FakeClock(1_000_000.0)
    store = SQLiteStore(path, ttl_s=0, clock=clock)
    try:
        await store.put("t", "kept", b"x")
        clock.now += 10 * 365 * 24 * 3600
        assert await store.get("t", "kept") == b"x"
    finally:
        await store.close()


async def test_a_full_file_refuses_and_keeps_every_record(path: Path) -> None:
    one, two = SQLiteStore(path, max_bytes=8), SQLiteStore(path, max_bytes=8)
    try:
        await one.put("t", "a", b"1234")
        await two.put("t", "b", b"5678")
        for store in (one, two):  # the cap counts both processes' records
            with pytest.raises(StoreUnavailable, match="full"):
                await store.put("t", "c", b"9")
        assert await one.get("t", "a") == b"1234"  # never dropped to make room
        assert await one.get("t", "b") == b"5678"
        assert await one.get("t", "c") is None
        await one.put("t", "b", b"56")  # a replacement takes the old one's room
        await two.put("t", "c", b"90")
        assert await one.delete("t", "a")
        await one.put("t", "d", b"abcd")
        assert await two.get("t", "d") == b"abcd"
    finally:
        await one.close()
        await two.close()


async def test_expired_records_make_room(path: Path) -> None:
    clock = FakeClock(1_000_000.0)
    store = SQLiteStore(path, ttl_s=10, max_bytes=8, clock=clock)
    try:
        await store.put("t", "a", b"12345678")
        with pytest.raises(StoreUnavailable, match="full"):
            await store.put("t", "b", b"x")
        clock.now += 10
        await store.put("t", "b", b"x")
        assert await store.get("t", "b") == b"x"
    finally:
        await store.close()


async def test_a_file_that_cannot_be_opened_says_which(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with pytest.raises(StoreUnavailable, match="cannot open the response store .*not-a-folder"):
        SQLiteStore(blocker / "responses.sqlite3")


async def test_a_closed_store_is_unavailable(path: Path) -> None:
    store = SQLiteStore(path)
    await store.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        await store.get("t", "a")
    await store.close()  # twice is fine
