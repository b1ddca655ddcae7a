"""The mocker with images (EngineRequest.images): a vision card's engine says
it takes them, a text-only card's refuses them (naming `messages`), as it
refuses spans outside the prompt; their tokens cost what prompt tokens cost
and are cached with image-aware hashes — the same image at the same place is
cached, a different one behind the same text misses from its first block, and
the cache's events name the router's hashes; a script's `{images}` says what
the engine saw; and a decode engine given the images' hashes without their
bytes fetches their blocks from the prefill engine."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.media.decode import content_hash
from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    EngineError,
    EngineImage,
    EngineOutput,
    EngineRequest,
    StopParams,
)
from rotor.protocol.kv import BlocksStored, KVEvent, block_hashes
from rotor.router import handover, migration

from support.mocker import CARD, TOK, collect, ids_of, request

BS = 8
VISION = replace(CARD, vision={"family": "test"})
PAD = TOK.encode("<|im_start|>")[0]  # any id: the mocker never reads what a span's tokens are
RED, BLUE = b"\x89PNG red", b"\x89PNG blue, longer"
HEAD = "<|im_start|>user\n" + " ".join(f"look-{i}" for i in range(6))
TAIL = " ".join(f"what-{i}" for i in range(8)) + "<|im_end|>\n<|im_start|>assistant\n"

Make = Callable[..., Awaitable[MockerEngine]]


@pytest.fixture
async def make() -> AsyncIterator[Make]:
    """`await make(card=VISION, **MockerConfig fields)`: a started engine at
    speedup 0 with blocks of BS tokens, stopped after the test."""
    engines: list[MockerEngine] = []

    async def build(card: Any = VISION, **config: Any) -> MockerEngine:
        config.setdefault("speedup_ratio", 0)
        config.setdefault("step_slice_ms", 0)
        config.setdefault("block_size", BS)
        engine = MockerEngine(card, TOK, MockerConfig(**config))
        await engine.start()
        engines.append(engine)
        return engine

    yield build
    for engine in engines:
        await engine.stop()


def with_images(
    mock: Any = None, *pictures: bytes | None, span: int = 30, **kw: Any
) -> EngineRequest:
    """HEAD, then one span of `span` PAD tokens per picture (None: the
    first picture's hash without its bytes, as a decode worker gets it), then TAIL."""
    head, tail = TOK.encode(HEAD), TOK.encode(TAIL)
    ids, images = list(head), []
    for data in pictures:
        key = content_hash(data if data is not None else pictures[0] or b"")
        images.append(EngineImage(key, len(ids), span, PAD, data))
        ids += [PAD] * span
    req = request(mock, **kw)
    return replace(req, token_ids=ids + tail, images=images)


def first_cached(outs: list[EngineOutput]) -> int | None:
    return next((o.cached_tokens for o in outs if o.cached_tokens is not None), None)


async def test_a_vision_card_takes_images_and_a_text_card_refuses_them(make: Make) -> None:
    vision, text = await make(), await make(card=CARD)
    assert vision.card.capabilities.images and not text.card.capabilities.images
    assert len(ids_of(await collect(vision, with_images({"output": "ok"}, RED)))) > 0
    with pytest.raises(EngineError) as e:
        await collect(text, with_images({"output": "ok"}, RED))
    assert (e.value.kind, e.value.param) == ("refused", "messages")
    assert "takes no images" in e.value.message
    # the same prompt's tokens without images: served as any
    plain = with_images({"output": "ok"}, RED)
    assert ids_of(await collect(text, replace(plain, images=[])))


@pytest.mark.parametrize(
    ("offset", "length"),
    [(-1, 4), (10, 0), (200, 4)],
    ids=["before the prompt", "empty", "past the prompt"],
)
async def test_a_span_outside_the_prompt_is_refused(make: Make, offset: int, length: int) -> None:
    engine = await make()
    bad = replace(request(None), images=[EngineImage("a" * 64, offset, length, PAD, b"x")])
    with pytest.raises(EngineError) as e:
        await collect(engine, bad)
    assert (e.value.kind, e.value.param) == ("refused", "messages")


async def test_spans_out_of_order_are_refused(make: Make) -> None:
    engine = await make()
    req = with_images(None, RED, BLUE)
    req.images.reverse()
    with pytest.raises(EngineError) as e:
        await collect(engine, req)
    assert e.value.param == "messages" and "images[1]" in e.value.message


async def test_the_script_names_the_images_the_engine_saw(make: Make) -> None:
    engine = await make()
    req = with_images({"output": "saw {images}."}, RED, BLUE, None, span=5)
    text = TOK.decode(ids_of(await collect(engine, req)))
    assert text.startswith("saw ") and text.endswith(".")
    seen = json.loads(text[4:-1])
    at = len(TOK.encode(HEAD))
    assert seen == [
        {"hash": content_hash(RED), "offset": at, "tokens": 5, "bytes": len(RED)},
        {"hash": content_hash(BLUE), "offset": at + 5, "tokens": 5, "bytes": len(BLUE)},
        {"hash": content_hash(RED), "offset": at + 10, "tokens": 5, "bytes": 0},
    ]
    none = TOK.decode(ids_of(await collect(engine, request({"output": "{images}"}))))
    assert none == "[]"


async def test_image_tokens_cost_what_prompt_tokens_cost(make: Make) -> None:
    pictured, plain = await make(), await make()
    req = with_images({"output": "ok"}, RED)
    await collect(pictured, req)
    await collect(plain, replace(req, request_id="plain", images=[]))
    assert pictured.state().simulated_ms == plain.state().simulated_ms > 0


async def test_the_same_image_is_cached_and_another_one_misses_from_its_first_block(
    make: Make,
) -> None:
    engine = await make()
    events: list[KVEvent] = []
    engine.kv_events(events.append)
    red = with_images({"output": "ok"}, RED)
    total = len(red.token_ids)
    assert first_cached(await collect(engine, red)) == 0
    # what the cache stored is what the router hashes of the same request
    stored = [h for e in events if isinstance(e, BlocksStored) for h in e.block_hashes]
    expected = block_hashes(red.token_ids, BS, None, red.images)
    assert stored[: len(expected)] == expected
    assert expected != block_hashes(red.token_ids, BS)

    again = replace(red, request_id="again")
    assert first_cached(await collect(engine, again)) == (total - 1) // BS * BS
    # the same text, another image: cached up to the block that holds its first token
    head = len(TOK.encode(HEAD))
    blue = with_images({"output": "ok"}, BLUE)
    assert blue.token_ids == red.token_ids
    assert first_cached(await collect(engine, blue)) == head // BS * BS
    # and the same tokens with no image at all: likewise (the blocks name RED)
    plain = replace(red, request_id="plain", images=[])
    assert first_cached(await collect(engine, plain)) == head // BS * BS


async def test_blocks_filled_while_decoding_hash_the_image_they_hold(make: Make) -> None:
    """The prompt ends inside an image's span and mid-block: the block that
    the first generated tokens fill holds image tokens too (named as it
    fills, not with the prompt's), and a next turn finds it."""
    engine = await make()
    events: list[KVEvent] = []
    engine.kv_events(events.append)
    ids = TOK.encode(HEAD)
    ids += [PAD] * (BS - len(ids) % BS + BS // 2)  # the span ends mid-block
    image = EngineImage(
        content_hash(RED), len(TOK.encode(HEAD)), len(ids) - len(TOK.encode(HEAD)), PAD, RED
    )
    turn = replace(request({"output": " ".join(["word"] * 3 * BS)}), token_ids=ids, images=[image])
    answer = ids_of(await collect(engine, turn))
    stored = [h for e in events if isinstance(e, BlocksStored) for h in e.block_hashes]
    whole = turn.token_ids + answer
    expected = block_hashes(whole, BS, None, [image])
    assert len(stored) > len(ids) // BS + 1 and stored == expected[: len(stored)]
    # the next turn, the answer in its prompt: every full block of it cached
    nxt = replace(turn, request_id="next", token_ids=whole + TOK.encode("more"))
    assert first_cached(await collect(engine, nxt)) == len(stored) * BS


async def test_a_decode_engine_fetches_the_image_blocks_without_the_bytes(make: Make) -> None:
    prefill, decode = await make(), await make()
    asked: list[list[int]] = []

    async def fetch(transfer: dict, hashes: list[int]) -> list[int]:
        asked.append(hashes)
        return prefill.kv_release(transfer["transfer_id"], hashes)

    decode.kv_fetcher(fetch)
    story = "The picture shows {images} and more words after it"
    whole = with_images({"output": story}, RED, stop=StopParams(max_tokens=100))
    job = replace(
        whole,
        request_id="job-p",
        stop=StopParams(max_tokens=1),
        annotations={**whole.annotations, PREFILL_ONLY: True},
    )
    [first] = await collect(prefill, job)
    assert first.kv_transfer is not None
    transfer = first.kv_transfer
    assert transfer["block_hashes"] == block_hashes(
        whole.token_ids[: transfer["prompt_tokens"] // BS * BS], BS, None, whole.images
    )
    progress = migration.Progress()
    progress.add(first)
    handed = handover.Handover(first, "p", transfer, 0.0)
    rest = handover.decode_request(whole, progress, handed, enforce=True)
    assert [i.data for i in rest.images] == [None]
    assert [(i.content_hash, i.offset, i.length) for i in rest.images] == [
        (i.content_hash, i.offset, i.length) for i in whole.images
    ]
    assert rest.annotations[KV_TRANSFER]["worker"] == "p"
    outs = await collect(decode, rest)
    assert asked == [transfer["block_hashes"]]
    state = decode.state()
    assert (state.kv_blocks_fetched, state.kv_fetch_failures) == (len(asked[0]), 0)
    assert first_cached(outs) == len(asked[0]) * BS  # every fetched block was used
    answer = TOK.decode(first.token_ids + ids_of(outs))
    assert f'"hash":"{content_hash(RED)}"' in answer and '"bytes":0' in answer


async def test_a_decode_request_with_another_image_is_not_offered_blocks(make: Make) -> None:
    prefill, decode = await make(), await make()

    async def fetch(transfer: dict, hashes: list[int]) -> list[int]:
        return prefill.kv_release(transfer["transfer_id"], hashes)

    decode.kv_fetcher(fetch)
    job = with_images(None, RED, stop=StopParams(max_tokens=1))
    job.annotations[PREFILL_ONLY] = True
    [first] = await collect(prefill, job)
    other = with_images(None, BLUE, stop=StopParams(max_tokens=4))
    other = replace(other, token_ids=other.token_ids + first.token_ids)
    assert first.kv_transfer is not None
    other.annotations.update({"resume_from": 1, KV_TRANSFER: {**first.kv_transfer, "worker": "p"}})
    await collect(decode, other)
    state = decode.state()
    assert (state.kv_blocks_fetched, state.kv_fetch_failures) == (0, 1)  # computed here
