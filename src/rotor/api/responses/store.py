"""Where stored responses live (`store: true`, `previous_response_id`).

The Responses API keeps each stored response as one opaque record (the
routes decide what it holds, serialized as bytes), under its tenant: the
API key that made it. A record stored under one tenant is not found under
another. The backends (memory here; SQLite for `rotor run`,
api/responses/sqlite_store.py; a JetStream key-value bucket for frontends
over NATS, runtime/nats/response_bucket.py) share one contract, so any
frontend continues any conversation when they share a backend. The contract
itself (`ResponseStore`, `StoreUnavailable`) is protocol/response_store.py's,
re-exported here: the JetStream backend fills it from below the API.

A store that cannot keep a record raises `StoreUnavailable`: the request
fails with a 503 rather than losing the history silently. A full store is
one that cannot: past its cap it refuses the new record and keeps every old
one. Only records past their TTL are dropped.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from rotor.protocol.response_store import DEFAULT_MAX_BYTES
from rotor.protocol.response_store import TENANT_SCOPE_KEY as TENANT_SCOPE_KEY
from rotor.protocol.response_store import ResponseStore as ResponseStore
from rotor.protocol.response_store import StoreUnavailable as StoreUnavailable

NO_TENANT = ""


def tenant_of(scope: Any) -> str:
    """The tenant a request acts for: the digest of its API key, or ""
    when the server takes no keys."""
    return str(scope.get(TENANT_SCOPE_KEY, NO_TENANT))


class MemoryStore:
    """`--response-store memory`: one process's dict. Each record is gone
    `ttl_s` seconds after it was put (0: never); past `max_records` records or
    `max_bytes` bytes of them (what is left once the expired are gone), a put
    raises StoreUnavailable and every record kept stays. `clock` is
    injectable for tests."""

    def __init__(
        self,
        ttl_s: float = 0.0,
        max_records: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.clock = clock
        # in the order they were put (a replaced record moves to the end): with
        # one TTL for all, the order they expire in
        self._records: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()
        self._bytes = 0

    async def get(self, tenant: str, response_id: str) -> bytes | None:
        self._expire()
        found = self._records.get((tenant, response_id))
        return None if found is None else found[1]

    async def put(self, tenant: str, response_id: str, record: bytes) -> None:
        self._expire()
        key = (tenant, response_id)
        old = self._records.get(key)
        records = len(self._records) + (old is None)
        size = self._bytes - (len(old[1]) if old is not None else 0) + len(record)
        if records > self.max_records or size > self.max_bytes:
            raise StoreUnavailable(
                f"the response store is full ({len(self._records)} records, {self._bytes} "
                f"bytes; at most {self.max_records} records, {self.max_bytes} bytes)"
            )
        self._drop(key)
        expires = self.clock() + self.ttl_s if self.ttl_s > 0 else 0.0
        self._records[key] = (expires, record)
        self._bytes += len(record)

    async def delete(self, tenant: str, response_id: str) -> bool:
        self._expire()
        return self._drop((tenant, response_id))

    async def close(self) -> None:
        self._records.clear()
        self._bytes = 0

    def _drop(self, key: tuple[str, str]) -> bool:
        found = self._records.pop(key, None)
        if found is None:
            return False
        self._bytes -= len(found[1])
        return True

    def _expire(self) -> None:
        """The expired records, gone: the oldest first, until one is not."""
        if self.ttl_s <= 0:
            return
        now = self.clock()
        while self._records:
            key, (expires, _) = next(iter(self._records.items()))
            if expires > now:
                return
            self._drop(key)
