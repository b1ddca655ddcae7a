"""`--response-store PATH`, `rotor run`'s default: the records in one SQLite
file (stdlib sqlite3), which several processes may share: `--http-workers`'
HTTP processes, several `rotor run`s on one host, a restarted server.

The file is in WAL mode (readers never wait for a writer, processes share
it), every call runs on the store's one thread, never on the event loop, and
a busy file is waited for `busy_timeout_s` before the call gives up
(StoreUnavailable). Each write is one `BEGIN IMMEDIATE` transaction: expired
records are swept, the cap is checked against what the file holds now (a
running total that triggers keep in the same transaction, so every process
sees the others' records), and the record is kept, or refused whole.

Times are wall-clock seconds (`clock`, injectable for tests): the file
outlives a process, and another process reads its expiry times.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from rotor.api.responses.store import StoreUnavailable
from rotor.protocol.response_store import DEFAULT_MAX_BYTES, DEFAULT_TTL_S

T = TypeVar("T")

BUSY_TIMEOUT_S = 5.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    record BLOB NOT NULL,
    size INTEGER NOT NULL,
    expires REAL,  -- wall-clock seconds; NULL: never
    PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS responses_by_expiry ON responses (expires)
    WHERE expires IS NOT NULL;
CREATE TABLE IF NOT EXISTS usage (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    bytes INTEGER NOT NULL
);
INSERT OR IGNORE INTO usage VALUES (1, 0);
CREATE TRIGGER IF NOT EXISTS responses_added AFTER INSERT ON responses
    BEGIN UPDATE usage SET bytes = bytes + NEW.size; END;
CREATE TRIGGER IF NOT EXISTS responses_removed AFTER DELETE ON responses
    BEGIN UPDATE usage SET bytes = bytes - OLD.size; END;
CREATE TRIGGER IF NOT EXISTS responses_replaced AFTER UPDATE ON responses
    BEGIN UPDATE usage SET bytes = bytes - OLD.size + NEW.size; END;
"""


class SQLiteStore:
    """The records of `path` (created, with its folder, when missing; only
    its owner may read either). `ttl_s`: seconds a record lives after its
    put (0: forever). `max_bytes`: the records' bytes the file may hold
    (the file itself is somewhat larger); a put past it raises
    StoreUnavailable. Opening is done at once: StoreUnavailable when the
    file cannot be opened."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        ttl_s: float = DEFAULT_TTL_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        self.path = Path(path)
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self.clock = clock
        self._busy_timeout_s = busy_timeout_s
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="rotor-response-store")
        self._db: sqlite3.Connection | None = None
        try:
            self._thread.submit(self._open).result()
        except StoreUnavailable:
            self._thread.shutdown()
            raise

    # -- the contract (each call one job on the store's thread) ----------------------------

    async def get(self, tenant: str, response_id: str) -> bytes | None:
        return await self._call(self._get, tenant, response_id)

    async def put(self, tenant: str, response_id: str, record: bytes) -> None:
        await self._call(self._put, tenant, response_id, record)

    async def delete(self, tenant: str, response_id: str) -> bool:
        return await self._call(self._delete, tenant, response_id)

    async def close(self) -> None:
        if self._db is None:
            return
        await self._call(self._close)
        self._thread.shutdown()

    # -- on the store's thread -------------------------------------------------------------

    async def _call(self, job: Callable[..., T], *args: object) -> T:
        if self._db is None:
            raise StoreUnavailable(f"the response store {self.path} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._guarded, job, *args)

    def _guarded(self, job: Callable[..., T], *args: object) -> T:
        """The job, its SQLite errors (busy, disk full, a broken file) said
        as StoreUnavailable naming the file."""
        if self._db is None:  # closed while this call waited for the thread
            raise StoreUnavailable(f"the response store {self.path} is closed")
        try:
            return job(self._db, *args)
        except sqlite3.Error as e:
            if self._db.in_transaction:
                self._db.rollback()
            raise StoreUnavailable(f"the response store {self.path}: {e}") from e

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # conversations: the owner's alone (WAL and SHM files take the file's mode)
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            db = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            raise StoreUnavailable(f"cannot open the response store {self.path}: {e}") from e
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints, never torn
            db.executescript(_SCHEMA)
        except sqlite3.Error as e:
            db.close()
            raise StoreUnavailable(f"cannot open the response store {self.path}: {e}") from e
        self._db = db

    def _close(self, db: sqlite3.Connection) -> None:
        self._db = None
        db.close()

    def _get(self, db: sqlite3.Connection, tenant: str, response_id: str) -> bytes | None:
        row = db.execute(
            "SELECT record FROM responses WHERE tenant = ? AND id = ?"
            " AND (expires IS NULL OR expires > ?)",
            (tenant, response_id, self.clock()),
        ).fetchone()
        return None if row is None else bytes(row[0])

    def _put(self, db: sqlite3.Connection, tenant: str, response_id: str, record: bytes) -> None:
        now = self.clock()
        expires = now + self.ttl_s if self.ttl_s > 0 else None
        db.execute("BEGIN IMMEDIATE")  # the write lock first: the cap holds across processes
        db.execute("DELETE FROM responses WHERE expires IS NOT NULL AND expires <= ?", (now,))
        (held,) = db.execute("SELECT bytes FROM usage").fetchone()
        old = db.execute(
            "SELECT size FROM responses WHERE tenant = ? AND id = ?", (tenant, response_id)
        ).fetchone()
        after = held - (old[0] if old is not None else 0) + len(record)
        if after > self.max_bytes:
            db.rollback()
            raise StoreUnavailable(
                f"the response store {self.path} is full ({held} bytes of records; "
                f"at most {self.max_bytes}, --response-store-max-bytes)"
            )
        db.execute(
            "INSERT INTO responses (tenant, id, record, size, expires) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (tenant, id) DO UPDATE SET"
            " record = excluded.record, size = excluded.size, expires = excluded.expires",
            (tenant, response_id, record, len(record), expires),
        )
        db.commit()

    def _delete(self, db: sqlite3.Connection, tenant: str, response_id: str) -> bool:
        gone = db.execute(
            "DELETE FROM responses WHERE tenant = ? AND id = ?"
            " AND (expires IS NULL OR expires > ?)",
            (tenant, response_id, self.clock()),
        )
        return gone.rowcount > 0
