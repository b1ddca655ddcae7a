"""A request's images beside it over NATS: JetStream's object store
`rotor_media` (runtime/nats/subjects.py), objects named by content hash.

One NATS message holds at most the server's `max_payload` (1 MiB by
default), and a client's image may be 10 MB or more. So a request whose
message, images inline, would fill more than `MEDIA_FILL` of it sends the
fewest (largest) images needed beside it instead: each is put in the store
under its `content_hash` (unless it is there already, whole and fresh: the
same image is stored once), the message carries those images with
`data=None` and names their hashes in its `rotor-media` header, and the
worker gets them back by hash (`filled`) before its engine sees the request.
A request that fits goes whole, as before: small images cost no store round
trip and no JetStream write. (A decode worker's request in disaggregation
carries images with `data=None` and no header: its engine needs only the KV.)

The store is a cache, never the record: the frontend keeps the request with
its bytes, so a request sent again (a migration, a resend after NATS came
back) puts what is missing again. Its stream has a TTL (`ttl_s`, 10 minutes:
a request's life, with room to spare) and a bound (`max_bytes`, 1 GiB) that
evicts the oldest objects ("discard old", where the object store's own
default refuses new ones: a full cache must not refuse requests). An object
is "there" only if its chunks are all there and it was put less than half a
TTL ago (older, it is put again, so it cannot expire between this check and
the worker's read). An image the worker cannot find whole (expired, evicted,
deleted, NATS came back empty, or replaced under it by another frontend's
put of the same image) ends the request "unavailable" (503; a pool moves it
to another worker, and the frontend puts it again); so does a store the
frontend cannot write. One frontend puts an image once at a time. The worker reads chunks by direct get, each read bounded: a missing
chunk is an error at once, never a consumer that waits for ever; and what it
read must hash to the name it asked for. It keeps what it read lately
(`cache_bytes`, least recently used out first), so an image that many
requests share is read once: named by its hash, a kept image is never stale.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import replace
from datetime import datetime, timezone
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.object_store import ObjectStore

from rotor.protocol import codec
from rotor.protocol.engine import EngineError, EngineImage, EngineRequest
from rotor.runtime.nats import subjects

T = TypeVar("T")

MEDIA_FILL = 0.8  # the share of the server's max payload a request with its images inline may fill
DEFAULT_TTL_S = 600.0
DEFAULT_MAX_BYTES = 1 << 30
DEFAULT_TIMEOUT_S = 30.0  # one put or get of all a request's images
DEFAULT_CACHE_BYTES = 256 << 20  # what a worker keeps of the images it read
HEADROOM = 1024  # bytes of a NATS message left to the protocol (a chunk is the rest)
# What a put into a store that is not there (any more) raises
_GONE = (
    nats.js.errors.NoStreamResponseError,
    nats.errors.NoRespondersError,
    nats.js.errors.NotFoundError,
)


def plan(request: EngineRequest, limit: int) -> tuple[bytes, list[EngineImage]]:
    """The request's message, and the images (one per hash) that go beside it:
    none when the whole request fits `limit` bytes; else the largest, until
    what stays inline fits (all of them, when even that is not enough)."""
    cost: dict[str, int] = {}  # inline bytes per hash (the same image twice costs twice)
    first: dict[str, EngineImage] = {}
    for image in request.images:
        if image.data is not None:
            cost[image.content_hash] = cost.get(image.content_hash, 0) + len(image.data)
            first.setdefault(image.content_hash, image)
    if sum(cost.values()) <= limit:  # it may fit whole (a 12 MB image is not encoded to see)
        whole = codec.encode_request(request)
        if len(whole) <= limit or not cost:
            return whole, []
    room = limit - len(codec.encode_request(_without(request, set(cost))))
    inline: set[str] = set()
    for name in sorted(cost, key=cost.__getitem__):
        if cost[name] > room:
            break
        inline.add(name)
        room -= cost[name]
    out = [first[name] for name in cost if name not in inline]
    return codec.encode_request(_without(request, {i.content_hash for i in out})), out


def _without(request: EngineRequest, names: set[str]) -> EngineRequest:
    """The request with the bytes of these images left out."""
    images = [
        replace(image, data=None) if image.content_hash in names else image
        for image in request.images
    ]
    return replace(request, images=images)


def header_value(images: list[EngineImage]) -> str:
    return ",".join(image.content_hash for image in images)


def hashes_of(value: str | None) -> list[str]:
    """The hashes a request's `rotor-media` header names."""
    return [name for name in (value or "").split(",") if name]


def missing(content_hash: str, why: str) -> EngineError:
    return EngineError(
        f"image {content_hash[:16]} is not in the media store {subjects.MEDIA_STORE!r} "
        f"({why}); send the request again",
        "unavailable",
    )


class MediaStore:
    """The store over one connection: `offload` on the frontend, `filled`
    on the worker. The stream is found or made at first use, and again
    after a failure (NATS may have come back empty)."""

    def __init__(
        self,
        nc: Client,
        ttl_s: float = DEFAULT_TTL_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        bucket: str = subjects.MEDIA_STORE,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        """`ttl_s`, `max_bytes`: the store's, for the side that makes it (a
        frontend); `timeout_s`: the bound of one request's puts or reads;
        `cache_bytes`: the images a worker keeps after reading them."""
        self.nc = nc
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.bucket = bucket
        self.stream = f"OBJ_{bucket}"
        self._js: JetStreamContext = nc.jetstream(timeout=min(timeout_s, 10.0))
        self._store: ObjectStore | None = None
        self._putting: dict[str, asyncio.Future[None]] = {}  # this frontend's puts under way
        self.cache_bytes = cache_bytes
        self._kept: OrderedDict[str, bytes] = OrderedDict()  # a worker's images read lately
        self._kept_bytes = 0
        self._reading: dict[str, asyncio.Future[bytes]] = {}  # its reads under way

    def limit(self) -> int:
        return int(self.nc.max_payload * MEDIA_FILL)

    # -- the frontend's side -------------------------------------------------------

    async def offload(self, request: EngineRequest) -> tuple[bytes, str | None]:
        """The request's message, and its `rotor-media` header (None: every
        image inline), its images beside it stored first."""
        data, beside = plan(request, self.limit())
        if not beside:
            return data, None
        await self._on_nats(
            asyncio.gather(*(self._put_once(image) for image in beside)), "store them in"
        )
        return data, header_value(beside)

    async def _on_nats(self, work: Awaitable[T], doing: str) -> T:
        """`work` within the timeout; a timeout or a NATS failure is an
        "unavailable" EngineError saying what it was `doing` (the store is
        looked up again next time: NATS may have come back without it)."""
        try:
            return await asyncio.wait_for(work, self.timeout_s)
        except EngineError:
            raise
        except (asyncio.TimeoutError, TimeoutError, nats.errors.Error, OSError) as e:
            self._store = None
            why = str(e) or type(e).__name__
            raise EngineError(
                f"could not {doing} {self.bucket!r} on NATS (the request's images): {why}",
                "unavailable",
            ) from None

    async def _put_once(self, image: EngineImage) -> None:
        """The image stored (one put at a time per hash from this frontend:
        a second put would purge the chunks the first one's reader reads)."""
        name = image.content_hash
        under_way = self._putting.get(name)
        if under_way is not None:
            return await asyncio.shield(under_way)
        done = asyncio.get_running_loop().create_future()
        self._putting[name] = done
        try:
            await self._put(image)
            done.set_result(None)
        except asyncio.CancelledError:  # (its request's bound): the others' put failed too
            done.set_exception(missing(name, "its put was cut short"))
            done.exception()
            raise
        except Exception as e:
            done.set_exception(e)
            done.exception()  # (read: nobody else may be waiting)
            raise
        finally:
            del self._putting[name]

    async def _put(self, image: EngineImage) -> None:
        assert image.data is not None
        for attempt in (1, 2):  # a second time when the stream was gone (NATS came back empty)
            store = await self._open(create=True)
            try:
                if await self._whole(store, image.content_hash, fresh=True):
                    return
                room = max(int(self.nc.max_payload) - HEADROOM, 1)
                meta = api.ObjectMeta(
                    name=image.content_hash,
                    options=api.ObjectMetaOptions(max_chunk_size=room),
                )
                await store.put(image.content_hash, image.data, meta=meta)
                return
            except _GONE:  # (a failed put's clean-up finds no stream: NotFoundError)
                self._store = None
                if attempt == 2:
                    raise

    async def _open(self, create: bool) -> ObjectStore:
        """The store; made (with "discard old") when it is not there and
        `create`; when it is there with other settings, used as it is."""
        if self._store is not None:
            return self._store
        if create:
            config = api.StreamConfig(
                name=self.stream,
                subjects=[f"$O.{self.bucket}.C.>", f"$O.{self.bucket}.M.>"],
                max_age=self.ttl_s if self.ttl_s > 0 else None,
                max_bytes=self.max_bytes,
                discard=api.DiscardPolicy.OLD,
                allow_rollup_hdrs=True,
                allow_direct=True,
            )
            try:
                await self._js.add_stream(config)
            except nats.js.errors.BadRequestError:  # there, with other settings
                pass
        self._store = await self._js.object_store(self.bucket)
        return self._store

    async def _whole(self, store: ObjectStore, name: str, fresh: bool) -> bool:
        """Whether the object is stored with all its chunks (and, `fresh`,
        put less than half a TTL ago)."""
        try:
            info = await store.get_info(name)
        except nats.js.errors.ObjectNotFoundError:
            return False
        if fresh and self.ttl_s > 0 and _age(info.mtime) > self.ttl_s / 2:
            return False
        chunks = f"$O.{self.bucket}.C.{info.nuid}"
        state = (await self._js.stream_info(self.stream, subjects_filter=chunks)).state
        return (state.subjects or {}).get(chunks, 0) == (info.chunks or 0)

    # -- the worker's side ---------------------------------------------------------

    async def filled(self, request: EngineRequest, header: str | None) -> EngineRequest:
        """The request with the bytes of the images its header names, read
        from the store (EngineError "unavailable" when one is not there whole)."""
        names = [
            name
            for name in dict.fromkeys(hashes_of(header))
            if any(i.content_hash == name and i.data is None for i in request.images)
        ]
        if not names:
            return request
        found = await self._on_nats(
            asyncio.gather(*(self.fetch(name) for name in names)), "read them from"
        )
        data = dict(zip(names, found, strict=True))
        images = [
            replace(image, data=data[image.content_hash])
            if image.data is None and image.content_hash in data
            else image
            for image in request.images
        ]
        return replace(request, images=images)

    async def fetch(self, name: str) -> bytes:
        """One image's bytes: from this worker's cache, from a read of it
        under way, or read from the store (and kept)."""
        kept = self._kept.get(name)
        if kept is not None:
            self._kept.move_to_end(name)
            return kept
        under_way = self._reading.get(name)
        if under_way is not None:
            return await asyncio.shield(under_way)
        reading = asyncio.ensure_future(self._read(name))
        reading.add_done_callback(_seen)  # (its readers may all have given up)
        self._reading[name] = reading
        try:
            data = await asyncio.shield(reading)
        finally:
            if self._reading.get(name) is reading:
                del self._reading[name]
        self._keep(name, data)
        return data

    def _keep(self, name: str, data: bytes) -> None:
        """Kept, the least recently used going past `cache_bytes` (by
        content hash: what is kept is never stale)."""
        if len(data) > self.cache_bytes or name in self._kept:
            return
        self._kept[name] = data
        self._kept_bytes += len(data)
        while self._kept_bytes > self.cache_bytes:
            _, old = self._kept.popitem(last=False)
            self._kept_bytes -= len(old)

    async def _read(self, name: str) -> bytes:
        """One image's bytes from the store, chunk by chunk (a direct get each)."""
        try:
            store = await self._open(create=False)
        except nats.js.errors.BucketNotFoundError:
            raise missing(name, "the store is not there") from None
        try:
            info = await store.get_info(name)
        except nats.js.errors.ObjectNotFoundError:
            self._store = None  # (gone with its stream, perhaps)
            raise missing(name, "expired, evicted or never stored") from None
        subject = f"$O.{self.bucket}.C.{info.nuid}"
        parts: list[bytes] = []
        seq = 1
        for _ in range(info.chunks or 0):
            try:
                msg = await self._js.get_msg(self.stream, seq, subject, direct=True, next=True)
            except nats.js.errors.NotFoundError:
                raise missing(name, "some of its chunks expired or were evicted") from None
            parts.append(msg.data or b"")
            seq = (msg.seq or seq) + 1
        data = b"".join(parts)
        if len(data) != (info.size or 0) or await asyncio.to_thread(_sha256, data) != name:
            raise missing(name, "what is stored under its hash is not it")
        return data


def _seen(done: asyncio.Future[bytes]) -> None:
    if not done.cancelled():
        done.exception()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _age(mtime: str | None) -> float:
    """Seconds since an object's put (its meta's time; unknown: very old)."""
    if not mtime:
        return float("inf")
    try:
        at = datetime.fromisoformat(mtime.replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return (datetime.now(timezone.utc) - at).total_seconds()
