"""`--router kv` with images (router/kv.py), and the disaggregated handover
of an image request (router/handover.py) over real mocker engines in this
process: the router hashes a request's blocks with its images as the
mocker's cache does, so a repeated image goes to the worker whose events hold
it and its overlap is what that worker then reports cached, while another
image behind the same text overlaps by the text-only blocks alone (with
events, and without them: approx mode); a prefill worker gets the images'
bytes, its decode worker their hashes only, and fetches their blocks; a
decode worker that fails is replaced by one sent the bytes again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.media.decode import content_hash
from rotor.model.card import ModelCard
from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    EngineImage,
    EngineOutput,
    EngineRequest,
    EngineStream,
    StopParams,
    pulled,
)
from rotor.protocol.kv import block_hashes
from rotor.protocol.lease import Lease
from rotor.router.disagg import DisaggPolicy
from rotor.router.kv import KVRouter
from rotor.router.kv_cost import KVCost
from rotor.router.modes import LocalLoad, RoundRobin
from rotor.router.pool import Pool

from support.link import FakeLink
from support.mocker import CARD, TOK, collect, ids_of, request
from support.sinks import Recorder
from support.wait import wait_for_async
from support.workers import lease

BS = 8
VISION = replace(CARD, vision={"family": "test"})
PAD = TOK.encode("<|im_start|>")[0]
RED, BLUE, GREEN = b"\x89PNG red", b"\x89PNG blue", b"\x89PNG green"
HEAD = TOK.encode("<|im_start|>user\n" + " ".join(f"look-{i}" for i in range(6)))
TAIL = TOK.encode("what is it?<|im_end|>\n<|im_start|>assistant\n")
SPAN = 40
WORKERS = [lease("a"), lease("b")]


def pictured(data: bytes, rid: str, mock: Any = None, **kw: Any) -> EngineRequest:
    """HEAD, an image's SPAN tokens, TAIL: the same tokens whatever the image."""
    image = EngineImage(content_hash(data), len(HEAD), SPAN, PAD, data)
    req = request(mock, rid=rid, **kw)
    return replace(req, token_ids=[*HEAD, *[PAD] * SPAN, *TAIL], images=[image])


@pytest.fixture
async def engines() -> AsyncIterator[dict[str, MockerEngine]]:
    """Two started vision mockers, "a" and "b", blocks of BS tokens."""
    made = {
        w: MockerEngine(VISION, TOK, MockerConfig(block_size=BS, speedup_ratio=0)) for w in "ab"
    }
    for engine in made.values():
        await engine.start()
    yield made
    for engine in made.values():
        await engine.stop()


def follow(kv: KVRouter, engines: dict[str, MockerEngine]) -> None:
    """The router's index reads each engine's KV events (NATS in production)."""
    assert kv.index is not None
    index = kv.index
    for worker, engine in engines.items():
        engine.kv_events(lambda event, w=worker: index.apply(w, event))


def first_cached(outs: list[EngineOutput]) -> int | None:
    return next((o.cached_tokens for o in outs if o.cached_tokens is not None), None)


async def test_a_repeated_image_goes_to_the_worker_that_holds_it(
    engines: dict[str, MockerEngine],
) -> None:
    kv = KVRouter(BS, KVCost(BS), predicted_ttl=0)
    follow(kv, engines)
    await collect(engines["b"], pictured(RED, "red-1"))  # b holds RED's blocks
    await collect(engines["a"], pictured(BLUE, "blue-1"))  # a holds BLUE's
    full = (len(HEAD) + SPAN + len(TAIL)) // BS
    text_only = len(HEAD) // BS  # the blocks before the first that holds image tokens

    red = pictured(RED, "red-2")
    pick = kv.choose(WORKERS, red, LocalLoad())
    assert (pick.worker_id, pick.headers["x-rotor-kv-overlap"]) == ("b", str(full))
    # the overlap tells the truth: b then reports those blocks cached
    outs = await collect(engines["b"], red)
    assert first_cached(outs) == min(full * BS, (len(red.token_ids) - 1) // BS * BS)

    pick = kv.choose(WORKERS, pictured(BLUE, "blue-2"), LocalLoad())
    assert (pick.worker_id, pick.headers["x-rotor-kv-overlap"]) == ("a", str(full))
    # another image behind the same text: the text-only blocks, on either worker
    green = pictured(GREEN, "green")
    assert kv.overlaps(block_hashes(green.token_ids, BS, None, green.images)) == {
        "a": text_only,
        "b": text_only,
    }
    assert kv.choose(WORKERS, green, LocalLoad()).headers["x-rotor-kv-overlap"] == str(text_only)


def test_without_events_the_record_of_an_image_is_its_own() -> None:
    kv = KVRouter(BS, KVCost(BS), approx_ttl=60.0)
    busy_a = [lease("a", kv_blocks_total=100, kv_blocks_free=98), lease("b")]
    red = pictured(RED, "r1")
    assert kv.choose(WORKERS, red, LocalLoad()).worker_id == "a"  # a tie: the smaller id
    full = len(red.token_ids) // BS
    again = kv.choose(busy_a, pictured(RED, "r2"), LocalLoad())
    assert (again.worker_id, again.headers["x-rotor-kv-overlap"]) == ("a", str(full))
    blue = kv.choose(busy_a, pictured(BLUE, "b1"), LocalLoad())
    assert blue.headers["x-rotor-kv-overlap"] == str(len(HEAD) // BS)
    # the same tokens with no image match the text-only blocks alone
    plain = kv.overlaps(block_hashes(red.token_ids, BS))
    assert plain and set(plain.values()) == {len(HEAD) // BS}


class MockerLink:
    """A pool's link to mocker engines in this process: what each was asked,
    and a decode engine's fetch from the prefill engine its transfer names."""

    def __init__(self, engines: dict[str, MockerEngine]) -> None:
        self.engines = engines
        self.asked: list[tuple[str, EngineRequest]] = []
        for engine in engines.values():
            engine.kv_fetcher(self._fetch)

    async def _fetch(self, transfer: dict[str, Any], hashes: list[int]) -> list[int]:
        return self.engines[transfer["worker"]].kv_release(transfer["transfer_id"], hashes)

    def generate(
        self, worker_id: str, request: EngineRequest, timeout: float, headers: Any = None
    ) -> EngineStream:
        self.asked.append((worker_id, request))
        return self.engines[worker_id].generate(request)

    def release_kv(self, worker_id: str, transfer_id: str) -> None:
        self.engines[worker_id].kv_release(transfer_id, [])

    def worker_gone(self, worker_id: str) -> None:
        raise AssertionError("no worker leaves in these tests")


async def test_the_prefill_worker_gets_the_bytes_and_the_decode_worker_the_kv(
    engines: dict[str, MockerEngine],
) -> None:
    link = MockerLink({"p": engines["a"], "d": engines["b"]})
    pool = Pool(
        ModelCard(CARD.name),
        link,  # type: ignore[arg-type]
        RoundRobin(),
        prefill_router=RoundRobin(),
        disagg=DisaggPolicy("always"),
    )
    for wid, role in (("p", "prefill"), ("d", "decode")):
        pool.upsert(Lease(wid, CARD.name, "card", "compat", "host:1", role=role))  # type: ignore[arg-type]
    script = {"output": "I see {images} in the picture, and nothing else"}
    req = pictured(RED, "r", script, stop=StopParams(max_tokens=200))
    outs = [out async for out in pulled(pool.generate(req))]

    (p, job), (d, decode) = link.asked
    assert (p, d) == ("p", "d") and job.annotations[PREFILL_ONLY]
    assert [i.data for i in job.images] == [RED]
    assert [i.data for i in decode.images] == [None]
    assert [i.content_hash for i in decode.images] == [content_hash(RED)]
    fetched = engines["b"].state().kv_blocks_fetched
    assert fetched == len(req.token_ids) // BS and engines["b"].state().kv_fetch_failures == 0
    answer = TOK.decode(ids_of(outs))
    assert answer.startswith("I see [") and answer.endswith("in the picture, and nothing else")
    assert '"bytes":0' in answer  # (the decode engine's script: no bytes came to it)
    assert pool.stats.disagg[("remote", "always")] == 1


async def test_a_decode_worker_that_fails_is_replaced_by_one_sent_the_bytes() -> None:
    """Migrated after the handover, the request computes its prompt again on
    another worker: that one is sent the images' bytes."""
    link = FakeLink()
    pool = Pool(
        ModelCard("m"),
        link,
        RoundRobin(),
        prefill_router=RoundRobin(),
        disagg=DisaggPolicy("always"),
    )
    for wid, role in (("p", "prefill"), ("d1", "decode"), ("d2", "decode")):
        pool.upsert(Lease(wid, "m", "card", "compat", "host:1", role=role))  # type: ignore[arg-type]
    image = EngineImage(content_hash(RED), 1, 4, PAD, RED)
    source = pool.generate(EngineRequest("r", "m", [1, *[PAD] * 4, 2], images=[image]))
    sink: Recorder[EngineOutput] = Recorder()
    source.subscribe(sink)
    await wait_for_async("the prefill asked", lambda: len(link.asked) == 1, 10, pause=0)
    assert link.asked[0].request.images == [image]
    transfer = {"engine": "mocker", "transfer_id": "t1", "block_hashes": [1]}
    link.asked[0].output(7, finish="length", kv_transfer=transfer)
    link.asked[0].done()
    await wait_for_async("the decode asked", lambda: len(link.asked) == 2, 10, pause=0)
    assert [i.data for i in link.asked[1].request.images] == [None]
    link.asked[1].gone()
    await wait_for_async("the migration asked", lambda: len(link.asked) == 3, 10, pause=0)
    again = link.asked[2].request
    assert KV_TRANSFER not in again.annotations and again.images == [image]
    source.stop()
