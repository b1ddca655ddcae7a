"""`rotor frontend`'s stored responses: a JetStream key-value bucket
(`rotor_responses`, runtime/nats/subjects.py) that every frontend on the
NATS server shares, so any frontend continues any conversation.

The bucket does the TTL and the cap: its `ttl` (the stream's max age: a
record is gone that long after its last put) and its `max_bytes`, with
JetStream's "discard new", so a full bucket refuses the put (a 503) and
keeps every record it holds. The first frontend creates the bucket with its
flags; a later one with other flags uses the bucket as it is, and says so.

Keys: NATS keys allow `-/_=.` and ASCII letters and digits, so the tenant
and the response id are each one token of URL-safe base64 (`tb…`, `rb…`),
or of their SHA-256 (`th…`, `rh…`) when longer than `PLAIN_MAX` bytes: a
client's id can be anything, and no two of them share a key.

A record larger than one NATS message (the server's `max_payload`, 1 MiB
by default) is cut into parts under keys of their own (`<key>.<gen>.<n>`),
written first, then the record's head at `<key>` naming them; a reader
follows the head, so it sees the old record or the new one whole, never a
mix. A replaced or deleted record's parts are purged after its head, and
a put that fails purges the parts it wrote (one cut short by the bound, or
by NATS going away, may leave some: they expire with the bucket's TTL). The
parts count against `max_bytes` like any record.

Every call is bounded by `timeout_s`: a NATS that is gone or slow is a
StoreUnavailable then, never a hang (the connection itself reconnects on
its own, runtime/nats/connect.py).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import secrets
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue

from rotor.protocol.response_store import StoreUnavailable
from rotor.runtime.nats import subjects

log = logging.getLogger("rotor.runtime")

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 5.0
PLAIN_MAX = 96  # bytes of tenant or id kept readable in the key; longer ones are hashed
WHOLE = b"\x00"  # a head that is the record itself
PARTS = b"\x01"  # a head that names the record's parts (JSON)
HEADROOM = 1024  # bytes of a NATS message left to the protocol
FULL = 10077  # JetStream's error code: "maximum bytes exceeded" (discard new)
# What a bucket that is not there (any more: NATS came back empty) makes a call raise
_GONE = (
    nats.js.errors.NoStreamResponseError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
)


@dataclass(frozen=True)
class _Head:
    gen: str
    parts: int
    size: int


def key_of(tenant: str, response_id: str) -> str:
    """The bucket key of a tenant's record: two tokens, each the text's
    URL-safe base64, or its SHA-256 when long."""
    return f"{_token('t', tenant)}.{_token('r', response_id)}"


def _token(kind: str, text: str) -> str:
    raw = text.encode()
    if len(raw) > PLAIN_MAX:
        return f"{kind}h{hashlib.sha256(raw).hexdigest()}"
    return f"{kind}b{base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}"


class ResponseBucket:
    """The bucket, over a connection given at `start` (the frontend's own).
    Until then, and while the bucket cannot be reached or made, every call
    raises StoreUnavailable; each call tries again."""

    def __init__(
        self,
        ttl_s: float,
        max_bytes: int,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        bucket: str = subjects.RESPONSES_BUCKET,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.bucket = bucket
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._kv: KeyValue | None = None
        self._said_settings = False

    async def start(self, nc: Client) -> None:
        """Use `nc`; the bucket is found or made now (a failure is logged:
        the calls try again)."""
        self._nc = nc
        self._js = nc.jetstream(timeout=self.timeout_s)
        try:
            await self._bounded("open", self._bucket())
        except StoreUnavailable as e:
            log.warning("stored responses: %s; trying again at the next request", e)

    # -- the contract --------------------------------------------------------------------

    async def get(self, tenant: str, response_id: str) -> bytes | None:
        return await self._bounded("get", self._get(key_of(tenant, response_id)))

    async def put(self, tenant: str, response_id: str, record: bytes) -> None:
        await self._bounded("put", self._put(key_of(tenant, response_id), record))

    async def delete(self, tenant: str, response_id: str) -> bool:
        return await self._bounded("delete", self._delete(key_of(tenant, response_id)))

    async def close(self) -> None:
        """The connection is the frontend's to close: the bucket only lets go."""
        self._nc = self._js = self._kv = None

    # -- the calls -----------------------------------------------------------------------

    async def _bounded(self, what: str, call: Awaitable[T]) -> T:
        try:
            return await asyncio.wait_for(call, self.timeout_s)
        except StoreUnavailable:
            raise
        except (asyncio.TimeoutError, nats.errors.TimeoutError):
            self._kv = None  # found (or made) again next time: NATS may come back empty
            raise StoreUnavailable(
                f"the response bucket {self.bucket!r} on NATS did not answer a {what} "
                f"within {self.timeout_s:g} s"
            ) from None
        except nats.js.errors.APIError as e:
            if e.err_code == FULL:
                raise StoreUnavailable(
                    f"the response bucket {self.bucket!r} is full (its max_bytes: "
                    "--response-store-max-bytes of the frontend that made it)"
                ) from e
            raise StoreUnavailable(f"the response bucket {self.bucket!r} on NATS: {e}") from e
        except (nats.errors.Error, OSError) as e:
            if isinstance(e, _GONE):
                self._kv = None  # the bucket is made again at the next call
            why = str(e) or type(e).__name__
            raise StoreUnavailable(f"the response bucket {self.bucket!r} on NATS: {why}") from e

    async def _bucket(self) -> KeyValue:
        if self._kv is not None:
            return self._kv
        js = self._js
        if js is None:
            raise StoreUnavailable("not connected to NATS (yet)")
        config = KeyValueConfig(
            bucket=self.bucket,
            history=1,
            ttl=self.ttl_s if self.ttl_s > 0 else None,
            max_bytes=self.max_bytes,
        )
        try:
            kv = await js.create_key_value(config)
        except nats.js.errors.BadRequestError:  # there, with other settings: use it as it is
            kv = await js.key_value(self.bucket)
            if not self._said_settings:
                self._said_settings = True
                log.warning(
                    "stored responses: the bucket %r exists with other settings than "
                    "--response-store-ttl / --response-store-max-bytes; its own are kept",
                    self.bucket,
                )
        self._kv = kv
        return kv

    async def _get(self, key: str) -> bytes | None:
        kv = await self._bucket()
        for _ in range(3):  # a record replaced while it was read: read the new one
            head = await _value(kv, key)
            if head is None:
                return None
            if head[:1] == WHOLE:
                return head[1:]
            parts = _head(head)
            pieces = [await _value(kv, f"{key}.{parts.gen}.{n}") for n in range(parts.parts)]
            found = [piece for piece in pieces if piece is not None]
            if len(found) == parts.parts:
                record = b"".join(found)
                if len(record) != parts.size:
                    raise StoreUnavailable(f"the stored response at {key} is damaged")
                return record
            again = await _value(kv, key)
            if again == head:  # its parts expired first: the record has expired
                return None
        return None

    async def _put(self, key: str, record: bytes) -> None:
        kv = await self._bucket()
        old = await _value(kv, key)
        room = max(self._room(), 1)
        gen = None
        if len(record) + 1 <= room:
            await kv.put(key, WHOLE + record)
        else:
            gen = secrets.token_hex(8)
            try:
                count = 0
                for start in range(0, len(record), room):
                    await kv.put(f"{key}.{gen}.{count}", record[start : start + room])
                    count += 1
                head = {"gen": gen, "parts": count, "size": len(record)}
                await kv.put(key, PARTS + json.dumps(head).encode())
            except (nats.errors.Error, OSError):
                await self._purge_parts(key, gen)
                raise
        if old is not None and old[:1] == PARTS:
            was = _head(old).gen
            if was != gen:
                await self._purge_parts(key, was)

    async def _delete(self, key: str) -> bool:
        kv = await self._bucket()
        head = await _value(kv, key)
        if head is None:
            return False
        # a purge through the stream's API, not a delete marker: it frees the
        # bytes, and works on a full bucket too
        await self._purge(f"{key}")
        if head[:1] == PARTS:
            await self._purge_parts(key, _head(head).gen)
        return True

    def _room(self) -> int:
        """The most bytes one value may have: a NATS message, less the protocol's."""
        assert self._nc is not None
        return int(self._nc.max_payload) - HEADROOM

    async def _purge_parts(self, key: str, gen: str) -> None:
        try:
            await self._purge(f"{key}.{gen}.*")
        except (nats.errors.Error, OSError) as e:  # they expire with the bucket's TTL
            log.warning("stored responses: could not purge the parts of %s: %s", key, e)

    async def _purge(self, key: str) -> None:
        assert self._js is not None
        await self._js.purge_stream(f"KV_{self.bucket}", subject=f"$KV.{self.bucket}.{key}")


async def _value(kv: KeyValue, key: str) -> bytes | None:
    try:
        entry = await kv.get(key)
    except nats.js.errors.KeyNotFoundError:  # never put, purged, expired
        return None
    return entry.value or b""


def _head(head: bytes) -> _Head:
    try:
        found: Any = json.loads(head[1:])
        return _Head(str(found["gen"]), int(found["parts"]), int(found["size"]))
    except (ValueError, KeyError, TypeError) as e:
        raise StoreUnavailable(f"a stored response's head is damaged: {e}") from None
