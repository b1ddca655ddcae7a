"""The stored-responses contract (`store: true`, `previous_response_id`), as
the layers that fill it see it: the Responses routes (api/responses) read and
write records through `ResponseStore`; the backends live where their I/O
does (memory and SQLite beside the routes, the JetStream bucket in
runtime/nats, which may not import the API), and the composition root
(serve/) picks one. api/responses/store.py re-exports both
names, so the routes need not know this module.

A store that cannot read or keep a record raises `StoreUnavailable`: the
request fails with a 503 rather than losing the history silently. That
includes a full store: past its cap a store refuses, it never drops a
tenant's history to make room (an expired record, past the TTL, is gone).
"""

from __future__ import annotations

from typing import Protocol


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
