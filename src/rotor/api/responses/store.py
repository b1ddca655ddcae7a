"""Where stored responses live (`store: true`, `previous_response_id`).

The Responses API keeps each stored response as one opaque record (the
routes decide what it holds, serialized as bytes), under its tenant: the
API key that made it. A record stored under one tenant is not found under
another. The backends (memory here; SQLite for `rotor run`, a JetStream
key-value bucket for frontends over NATS) share one contract, so any
frontend continues any conversation when they share a backend.

A store that cannot keep a record raises `StoreUnavailable`: the request
fails with a 503 rather than losing the history silently.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

# The ASGI scope key the API-key middleware sets to the tenant of the key
# that matched (a digest of it, never the key); absent without --api-key.
TENANT_SCOPE_KEY = "rotor.tenant"
NO_TENANT = ""


def tenant_of(scope: Any) -> str:
    """The tenant a request acts for: the digest of its API key, or ""
    when the server takes no keys."""
    return str(scope.get(TENANT_SCOPE_KEY, NO_TENANT))


class StoreUnavailable(Exception):
    """The store could not read or keep a record (unreachable, full); str(e)
    says why, for the log and for the 503's message."""


class ResponseStore(Protocol):
    """A tenant's records by response id."""

    async def get(self, tenant: str, response_id: str) -> bytes | None:
        """The record, or None when this tenant has none by that id (never
        stored, deleted, expired, or another tenant's)."""
        ...

    async def put(self, tenant: str, response_id: str, record: bytes) -> None:
        """Keeps (or replaces) the record; StoreUnavailable when it cannot."""
        ...

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Forgets the record; False when there was none."""
        ...

    async def close(self) -> None: ...


class MemoryStore:
    """`--response-store memory`: one process's dict, oldest dropped first
    past `max_records`, each record gone `ttl_s` seconds after it was put
    (0: never). `clock` is injectable for tests."""

    def __init__(
        self,
        ttl_s: float = 0.0,
        max_records: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_records = max_records
        self.clock = clock
        self._records: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()

    async def get(self, tenant: str, response_id: str) -> bytes | None:
        key = (tenant, response_id)
        found = self._records.get(key)
        if found is None:
            return None
        expires, record = found
        if expires and self.clock() >= expires:
            del self._records[key]
            return None
        return record

    async def put(self, tenant: str, response_id: str, record: bytes) -> None:
        key = (tenant, response_id)
        expires = self.clock() + self.ttl_s if self.ttl_s > 0 else 0.0
        self._records.pop(key, None)
        self._records[key] = (expires, record)
        while len(self._records) > self.max_records:
            self._records.popitem(last=False)

    async def delete(self, tenant: str, response_id: str) -> bool:
        return self._records.pop((tenant, response_id), None) is not None

    async def close(self) -> None:
        self._records.clear()
