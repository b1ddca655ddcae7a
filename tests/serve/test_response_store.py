"""Which store a server builds for stored responses (serve/response_store.py):
the XDG state folder's SQLite file by default for `rotor run`, the NATS
bucket for `rotor frontend`, `memory`, or a path; and the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from rotor.api.responses.sqlite_store import SQLiteStore
from rotor.api.responses.store import MemoryStore, StoreUnavailable
from rotor.config import ResponseStoreConfig
from rotor.runtime.nats.response_bucket import ResponseBucket
from rotor.serve.build import StartupError
from rotor.serve.response_store import build_response_store, default_path


def test_the_default_file_is_in_the_xdg_state_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_path() == tmp_path / "state" / "rotor" / "responses.sqlite3"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # the XDG spec: ignored
    assert default_path() == tmp_path / "home" / ".local" / "state" / "rotor" / "responses.sqlite3"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_path() == tmp_path / "home" / ".local" / "state" / "rotor" / "responses.sqlite3"


async def test_rotor_run_keeps_them_in_that_file_by_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    config = ResponseStoreConfig(ttl_s=60, max_bytes=1000)
    store = build_response_store(config, "file")
    try:
        assert isinstance(store, SQLiteStore)
        assert store.path == tmp_path / "rotor" / "responses.sqlite3"
        assert (store.ttl_s, store.max_bytes) == (60, 1000)
        await store.put("t", "resp_1", b"kept")
    finally:
        await store.close()
    again = build_response_store(ResponseStoreConfig(where=str(store.path)), "nats")
    try:
        assert await again.get("t", "resp_1") == b"kept"  # a frontend may use the file too
    finally:
        await again.close()


async def test_memory_is_memory_with_the_flags() -> None:
    store = build_response_store(ResponseStoreConfig(where="memory", max_bytes=4), "file")
    assert isinstance(store, MemoryStore)
    await store.put("t", "a", b"1234")
    with pytest.raises(StoreUnavailable, match="full"):
        await store.put("t", "b", b"5")


def test_rotor_frontend_keeps_them_in_the_bucket_by_default() -> None:
    config = ResponseStoreConfig(ttl_s=60, max_bytes=1000)
    for given in (config, ResponseStoreConfig(where="nats", ttl_s=60, max_bytes=1000)):
        store = build_response_store(given, "nats")
        assert isinstance(store, ResponseBucket)
        assert (store.ttl_s, store.max_bytes) == (60, 1000)


def test_rotor_run_has_no_bucket() -> None:
    with pytest.raises(StartupError, match="rotor frontend's"):
        build_response_store(ResponseStoreConfig(where="nats"), "file")


def test_a_path_that_cannot_be_opened_is_a_startup_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    where = str(tmp_path / "file" / "responses.sqlite3")
    with pytest.raises(StartupError, match="--response-store: cannot open"):
        build_response_store(ResponseStoreConfig(where=where), "file")
