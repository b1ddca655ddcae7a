"""The response store as the routes use it: records in and out (record.py),
a store that fails as a 503, an id no record has as OpenAI's 404, and the
writes a stream or a background response makes after its request has been
answered.

Besides records, the store keeps one kind of marker: `cancel_<id>`, a
cancel asked at a frontend that is not running the background response
(the one running it looks for it, background.py). Response ids start with
`resp_`, so no marker is ever read as a response.
"""

from __future__ import annotations

import asyncio
import logging

from rotor.api.errors import APIError
from rotor.api.responses.record import Record, decode, encode
from rotor.api.responses.store import ResponseStore, StoreUnavailable

log = logging.getLogger("rotor.api")

ID_PREFIX = "resp_"
_CANCEL = "cancel_"
_RETRY_AFTER = {"retry-after": "1"}


def unavailable(error: StoreUnavailable) -> APIError:
    return APIError(503, f"the response store is unavailable: {error}", None, _RETRY_AFTER)


def not_found(response_id: str, param: str | None = None) -> APIError:
    return APIError(404, f"Response with id {response_id!r} not found.", param)


class Stored:
    """One app's store, for the Responses routes."""

    def __init__(self, store: ResponseStore) -> None:
        self.store = store
        self._writes: set[asyncio.Task[None]] = set()  # `update_later`'s, till done

    async def find(self, tenant: str, response_id: str) -> Record | None:
        """The tenant's record by that id, or None; a 503 when the store fails."""
        data = await self._get(tenant, response_id)
        return decode(data) if data is not None else None

    async def exists(self, tenant: str, response_id: str) -> bool:
        """Whether the tenant has a record by that id (not read: it may be long)."""
        return await self._get(tenant, response_id) is not None

    async def _get(self, tenant: str, response_id: str) -> bytes | None:
        if not response_id.startswith(ID_PREFIX):
            return None
        try:
            return await self.store.get(tenant, response_id)
        except StoreUnavailable as e:
            raise unavailable(e) from None

    async def load(self, tenant: str, response_id: str, param: str | None = None) -> Record:
        """The tenant's record by that id: a 404 naming it (and `param`) when there is none."""
        found = await self.find(tenant, response_id)
        if found is None:
            raise not_found(response_id, param)
        return found

    async def save(self, tenant: str, record: Record) -> None:
        """Keeps the record; a 503 when the store cannot."""
        try:
            await self.store.put(tenant, record.id, encode(record))
        except StoreUnavailable as e:
            raise unavailable(e) from None

    async def update(self, tenant: str, record: Record) -> bool:
        """Replaces the record if the tenant still has one by its id (one
        deleted meanwhile stays deleted: False). Read then write, not one
        step: a delete between the two is undone."""
        if not await self.exists(tenant, record.id):
            return False
        await self.save(tenant, record)
        return True

    def update_later(self, tenant: str, record: Record) -> None:
        """`update`, on a task of its own (from a stream's end, which cannot
        wait); a store that fails is logged: the client was answered already."""
        task = asyncio.ensure_future(self._update_logged(tenant, record))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _update_logged(self, tenant: str, record: Record) -> None:
        try:
            await self.update(tenant, record)
        except APIError as e:
            log.error("response %s was not stored as %s: %s", record.id, record.status, e.message)

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Forgets the record; False when the tenant had none by that id."""
        if not response_id.startswith(ID_PREFIX):
            return False
        try:
            return await self.store.delete(tenant, response_id)
        except StoreUnavailable as e:
            raise unavailable(e) from None

    async def forget(self, tenant: str, response_id: str) -> None:
        """`delete`, for a response that never got going; a store that fails is logged."""
        try:
            await self.delete(tenant, response_id)
        except APIError as e:
            log.error("response %s stays stored as it began: %s", response_id, e.message)

    # -- cancels asked elsewhere --------------------------------------------------------------

    async def ask_cancel(self, tenant: str, response_id: str) -> None:
        try:
            await self.store.put(tenant, _CANCEL + response_id, b"cancel")
        except StoreUnavailable as e:
            raise unavailable(e) from None

    async def cancel_asked(self, tenant: str, response_id: str) -> bool:
        """Whether a cancel was asked (a store that fails says no: asked again, it is seen)."""
        try:
            return await self.store.get(tenant, _CANCEL + response_id) is not None
        except StoreUnavailable:
            return False

    async def cancel_done(self, tenant: str, response_id: str) -> None:
        try:
            await self.store.delete(tenant, _CANCEL + response_id)
        except StoreUnavailable as e:
            log.warning("the cancel marker of %s stays: %s", response_id, e)

    async def drain(self) -> None:
        """Waits for the writes `update_later` started (at shutdown)."""
        while self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
