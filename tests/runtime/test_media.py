"""A request's images over NATS (runtime/nats/media.py), against a real
nats-server with its default 1 MiB max payload: a 12 MB image published
through a RequestPlane reaches the worker's engine byte for byte (beside
the message, in the `rotor_media` object store), small ones travel inline
and store nothing, the same image is stored once however many requests
carry it, a request sent again puts an image that is gone again, and an
image the worker cannot find whole ends the request "unavailable" at once."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from typing import Any

import nats as nats_py
import pytest
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from rotor.protocol import codec
from rotor.protocol.engine import (
    EngineImage,
    EngineOutput,
    EngineRequest,
    pulled,
)
from rotor.runtime.nats import messages as wire
from rotor.runtime.nats import subjects
from rotor.runtime.nats.media import MediaStore, plan
from rotor.runtime.nats.request_plane import RequestPlane
from rotor.runtime.nats.worker import WorkerService

from support.cluster import Nats, nats_server
from support.mocker import TOK, MakeEngine, request
from support.seeing import Seeing

MB = 1 << 20
_names = itertools.count()


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


@dataclass
class Served:
    engine: Seeing
    worker: WorkerService
    plane: RequestPlane
    store: MediaStore  # the frontend's
    nc: Client  # a third connection, for looking and meddling

    async def run(self, req: EngineRequest) -> list[EngineOutput]:
        return [out async for out in pulled(self.plane.generate(self.worker.worker_id, req, 30))]

    async def stream_state(self) -> Any:
        return (await self.nc.jetstream().stream_info(self.store.stream)).state


@pytest.fixture
async def served(nats: Nats, make_engine: MakeEngine) -> AsyncIterator[Served]:
    """A worker of a recording mocker and a frontend's request plane, over
    connections of their own, sharing a media store of this test's own."""
    conns = [await nats_py.connect(nats.url) for _ in range(3)]
    bucket = f"media_{next(_names)}"
    engine = Seeing(await make_engine())
    # (the worker keeps no image it read, unless a test says so: each request reads the store)
    kept = MediaStore(conns[0], bucket=bucket, cache_bytes=0)
    worker = WorkerService(conns[0], engine, TOK, media=kept)
    await worker.start()
    store = MediaStore(conns[1], bucket=bucket)
    plane = RequestPlane(conns[1], media=store)
    await plane.start()
    try:
        yield Served(engine, worker, plane, store, conns[2])
    finally:
        await plane.stop()
        await worker.stop()
        for nc in conns:
            await nc.close()


def image(data: bytes, offset: int = 1) -> EngineImage:
    return EngineImage(hashlib.sha256(data).hexdigest(), offset, 1, 7, data)


def with_images(*images: EngineImage) -> EngineRequest:
    return request({"output": " ok", "end": "length"}, images=list(images))


def ends_well(outs: list[EngineOutput]) -> None:
    assert outs and outs[-1].finish == "length"


# -- which images go beside ------------------------------------------------------------


def test_a_request_that_fits_goes_whole() -> None:
    req = with_images(image(os.urandom(1000)), image(os.urandom(2000)))
    data, beside = plan(req, 10_000)
    assert beside == [] and codec.decode_request(data) == req


def test_the_largest_images_go_beside_until_the_rest_fits() -> None:
    small, mid, big = os.urandom(1000), os.urandom(4000), os.urandom(9000)
    req = with_images(image(mid), image(small), image(big))
    data, beside = plan(req, 7000)
    assert [i.content_hash for i in beside] == [image(big).content_hash]
    assert len(data) <= 7000
    sent = codec.decode_request(data)
    assert [i.data for i in sent.images] == [mid, small, None]
    data, beside = plan(req, 5000)  # only the smallest fits beside the token ids
    assert {i.content_hash for i in beside} == {image(big).content_hash, image(mid).content_hash}
    assert [i.data for i in codec.decode_request(data).images] == [None, small, None]


def test_an_image_twice_costs_twice_and_goes_beside_once() -> None:
    twice = os.urandom(3000)
    req = with_images(image(twice, 1), image(twice, 5))
    data, beside = plan(req, 5000)
    assert [i.content_hash for i in beside] == [image(twice).content_hash]
    assert [i.data for i in codec.decode_request(data).images] == [None, None]


def test_images_without_bytes_are_not_sent_beside() -> None:
    req = with_images(replace(image(os.urandom(10)), data=None))
    req.token_ids = list(range(2000))
    assert plan(req, 100)[1] == []


# -- over NATS -------------------------------------------------------------------------


async def test_a_12_mb_image_reaches_the_engine_and_a_small_one_travels_inline(
    served: Served,
) -> None:
    assert served.plane.nc.max_payload == MB  # (nats-server's default: the image is 12 of it)
    big, small = os.urandom(12 * MB), os.urandom(20_000)
    ends_well(await served.run(with_images(image(small, 1), image(big, 3))))
    (seen,) = served.engine.seen
    assert [i.data for i in seen.images] == [small, big]
    assert [i.content_hash for i in seen.images] == [
        image(small).content_hash,
        image(big).content_hash,
    ]
    store = await served.nc.jetstream().object_store(served.store.bucket)
    assert [info.name for info in await store.list()] == [image(big).content_hash]


async def test_small_images_travel_inline_and_store_nothing(served: Served) -> None:
    images = [os.urandom(100_000) for _ in range(3)]
    ends_well(await served.run(with_images(*(image(data, i) for i, data in enumerate(images)))))
    assert [i.data for i in served.engine.seen[0].images] == images
    with pytest.raises(NotFoundError):  # the store was not even made
        await served.stream_state()


async def test_the_same_image_is_stored_once(served: Served) -> None:
    big = os.urandom(3 * MB)
    ends_well(await served.run(with_images(image(big, 1), image(big, 9))))
    state = await served.stream_state()
    stored = state.last_seq  # its chunks and its meta: one put
    assert stored == state.messages > 3
    await asyncio.gather(*(served.run(with_images(image(big))) for _ in range(4)))
    ends_well(await served.run(with_images(image(big))))
    assert (await served.stream_state()).last_seq == stored  # no put since
    assert all(i.data == big for seen in served.engine.seen for i in seen.images)
    assert len(served.engine.seen) == 6


async def test_one_new_image_in_requests_at_once_is_put_once(served: Served) -> None:
    big = os.urandom(3 * MB)
    outs = await asyncio.gather(*(served.run(with_images(image(big))) for _ in range(5)))
    for out in outs:
        ends_well(out)
    state = await served.stream_state()
    assert state.last_seq == state.messages  # nothing put twice (a second put purges the first's)
    assert [i.data for seen in served.engine.seen for i in seen.images] == [big] * 5


async def test_a_request_sent_again_puts_an_image_that_is_gone_again(served: Served) -> None:
    big = os.urandom(2 * MB)
    ends_well(await served.run(with_images(image(big))))
    store = await served.nc.jetstream().object_store(served.store.bucket)
    await store.delete(image(big).content_hash)
    ends_well(await served.run(with_images(image(big))))  # (a migration sends it so)
    # evicted: its meta is there, its chunks are not
    info = await store.get_info(image(big).content_hash)
    await served.nc.jetstream().purge_stream(
        served.store.stream, subject=f"$O.{served.store.bucket}.C.{info.nuid}"
    )
    ends_well(await served.run(with_images(image(big))))
    assert [i.data for seen in served.engine.seen for i in seen.images] == [big] * 3


async def ask(served: Served, req: EngineRequest, hashes: str) -> tuple[str, bytes | None]:
    """`req` published as a frontend would, its header naming `hashes`:
    the worker's first answer (kind, payload)."""
    answers: asyncio.Queue[bytes] = asyncio.Queue()
    inbox = served.nc.new_inbox()

    async def got(msg: Any) -> None:
        answers.put_nowait(msg.data)

    await served.nc.subscribe(inbox, cb=got)
    await served.nc.publish(
        subjects.generate(served.worker.worker_id),
        codec.encode_request(req),
        reply=inbox,
        headers={subjects.MEDIA_HEADER: hashes},
    )
    _, kind, payload = wire.parse(await asyncio.wait_for(answers.get(), 10))
    return kind, payload


async def test_an_image_not_in_the_store_is_unavailable(served: Served) -> None:
    gone = image(os.urandom(2 * MB))
    kind, payload = await ask(served, with_images(replace(gone, data=None)), gone.content_hash)
    assert kind == wire.ERROR and payload is not None  # (the store was never made)
    error = codec.decode_error(payload)
    assert (error.kind, error.cause) == ("unavailable", "unavailable")
    assert gone.content_hash[:16] in error.message
    # stored, then its chunks evicted: an error at once, never a read that waits
    ends_well(await served.run(with_images(gone)))
    store = await served.nc.jetstream().object_store(served.store.bucket)
    info = await store.get_info(gone.content_hash)
    await served.nc.jetstream().purge_stream(
        served.store.stream, subject=f"$O.{served.store.bucket}.C.{info.nuid}"
    )
    kind, payload = await ask(served, with_images(replace(gone, data=None)), gone.content_hash)
    assert kind == wire.ERROR and payload is not None
    assert codec.decode_error(payload).kind == "unavailable"
    assert len(served.engine.seen) == 1  # the engine saw neither


async def test_a_store_that_is_gone_is_made_again(served: Served) -> None:
    """NATS came back empty (its JetStream store lost): the next request's
    put makes the store again, over the same connections."""
    big = os.urandom(2 * MB)
    ends_well(await served.run(with_images(image(big))))
    await served.nc.jetstream().delete_stream(served.store.stream)
    ends_well(await served.run(with_images(image(big))))
    assert [i.data for seen in served.engine.seen for i in seen.images] == [big] * 2
    assert (await served.stream_state()).messages > 2


async def test_a_worker_reads_an_image_once_and_keeps_what_it_may(served: Served) -> None:
    big, other = os.urandom(2 * MB), os.urandom(2 * MB)
    served.worker.media.cache_bytes = 8 * MB
    ends_well(await served.run(with_images(image(big))))
    store = await served.nc.jetstream().object_store(served.store.bucket)
    await store.delete(image(big).content_hash)
    # gone from the store, kept by the worker: served without a read
    sent = with_images(replace(image(big), data=None))
    kind, _ = await ask(served, sent, image(big).content_hash)
    assert kind == wire.OUTPUTS and served.engine.seen[-1].images[0].data == big
    # a worker keeps no more than its bound: the least recently used goes
    served.worker.media.cache_bytes = 3 * MB
    ends_well(await served.run(with_images(image(other))))
    await store.delete(image(other).content_hash)
    kind, _ = await ask(
        served, with_images(replace(image(other), data=None)), image(other).content_hash
    )
    assert kind == wire.OUTPUTS
    kind, payload = await ask(served, sent, image(big).content_hash)
    assert kind == wire.ERROR and payload is not None
    assert codec.decode_error(payload).kind == "unavailable"
