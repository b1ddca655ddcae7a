"""The stored-responses contract (`store: true`, `previous_response_id`), as
the layers that fill it see it: the Responses routes (api/responses) read and
write records through `ResponseStore`; the backends live where their I/O
does (memory and SQLite beside the routes, the JetStream bucket in
runtime/nats, which may not import the API), and the composition root
(serve/) picks one. api/responses/store.py re-exports both
names and the tenant's scope key, so the routes need not know this module.

A store that cannot read or keep a record raises `StoreUnavailable`: the
request fails with a 503 rather than losing the history silently. That
includes a full store: past its cap a store refuses, it never drops a
tenant's history to make room (an expired record, past the TTL, is gone).
"""

from __future__ import annotations

from typing import Protocol

# The ASGI scope key the API-key middleware (api/auth.py) sets to the tenant
# of the key that matched (a digest of it, never the key); absent without
# --api-key. The routes read it through api/responses/store.tenant_of.
TENANT_SCOPE_KEY = "rotor.tenant"

DEFAULT_TTL_S = 30 * 24 * 3600.0  # --response-store-ttl: OpenAI keeps responses 30 days
DEFAULT_MAX_BYTES = 1 << 30  # --response-store-max-bytes: 1 GiB of records


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
