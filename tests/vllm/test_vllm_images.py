"""vLLM serves a vision-language model through rotor's engine contract: a
request's images (EngineRequest.images: the expanded prompt, each image's
span, its bytes and content hash) reach vLLM as the collapsed prompt plus the
decoded images, keyed by their content hashes; greedy answers equal vLLM's
own for the same text prompt and image; a repeated image is found in vLLM's
prefix cache and a different one is not; vLLM's KV events are relayed under
rotor's image-aware block hashes. The model is the tiny random Idefics3 of
support/vllm_vlm.py. The relay's mapping of vLLM's extra keys is also
checked on vLLM's own event class, without an engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rotor.config import ModelConfig
from rotor.engines.registry import engine_spec
from rotor.engines.vllm.kv_relay import KVRelay
from rotor.media.decode import content_hash
from rotor.protocol.engine import (
    EngineError,
    EngineImage,
    EngineOutput,
    EngineRequest,
    SamplingParams,
    StopParams,
    pulled,
)
from rotor.protocol.kv import BlocksStored, KVEvent, block_hashes, lora_root
from rotor.serve.build import build_engine, load

from support.vllm_setup import VLLM_ARGS, VLLM_ENV
from support.vllm_vlm import BOS, EOS, FAKE, GLOBAL, IMAGE, IMAGE_SEQ_LEN, png
from support.wait import wait_for_async

BLOCK = 32
# a text block before the image, so a different image still finds block 0 cached
QUESTION = "Please look at the picture below and tell me what it shows."


def _prompt(tok: Any) -> tuple[str, list[int]]:
    """A user turn with one image after a long question, as Idefics3's template
    renders it: the text and its token ids (one `<image>` placeholder)."""
    text = f"{BOS}User: {QUESTION}{IMAGE}And what else?{EOS}\nAssistant:"
    return text, tok.encode(text, add_special_tokens=False).ids


def _expanded(tok: Any, ids: list[int], data: bytes) -> tuple[list[int], EngineImage]:
    """The prompt as rotor's frontend sends it: the placeholder replaced by the
    image's tokens as Idefics3's processor makes them (no tiling here)."""
    image_id, fake, glob = (tok.token_to_id(t) for t in (IMAGE, FAKE, GLOBAL))
    at = ids.index(image_id)
    span = [fake, glob, *[image_id] * IMAGE_SEQ_LEN, fake]
    image = EngineImage(content_hash(data), at, len(span), image_id, data)
    return ids[:at] + span + ids[at + 1 :], image


async def _run(engine: Any, rid: str, ids: list[int], images: list[EngineImage]) -> EngineOutput:
    """One greedy request's outputs merged: its token ids, its cached count."""
    request = EngineRequest(
        rid,
        "tiny-vlm",
        ids,
        sampling=SamplingParams(temperature=0.0),
        stop=StopParams(max_tokens=12, ignore_eos=True),
        images=images,
    )
    outs = [out async for out in pulled(engine.generate(request))]
    merged = EngineOutput(index=0, token_ids=[t for o in outs for t in o.token_ids])
    merged.cached_tokens = outs[0].cached_tokens
    return merged


async def _vllm_own(engine: Any, rid: str, text: str, data: bytes) -> tuple[list[int], list[int]]:
    """vLLM's own answer to the text prompt and the image (it tokenizes and
    expands, hashes the image itself): its prompt's ids and greedy ids."""
    from vllm import SamplingParams as VLLMSampling
    from vllm.multimodal.media import ImageMediaIO

    image = ImageMediaIO().load_bytes(data).media
    params = VLLMSampling(temperature=0, max_tokens=12, ignore_eos=True)
    prompt = {"prompt": text, "multi_modal_data": {"image": image}}
    last = None
    async for out in engine.llm.generate(prompt, params, rid):
        last = out
    assert last is not None and last.finished
    return list(last.prompt_token_ids), list(last.outputs[0].token_ids)


def _held(events: list[KVEvent]) -> set[int]:
    return {h for e in events if isinstance(e, BlocksStored) for h in e.block_hashes}


@pytest.mark.asyncio
async def test_images_reach_vllm_answer_as_its_own_and_cache_by_content(
    vlm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in VLLM_ENV.items():
        monkeypatch.setenv(key, value)
    spec = engine_spec("vllm")
    card, tok = load(ModelConfig(model_path=str(vlm_dir)), spec)
    assert tok is not None
    engine = build_engine(spec, card, tok, {"engine_args": list(VLLM_ARGS)})
    await engine.start()
    try:
        # vLLM's model config says it serves images
        assert engine.card.capabilities.images
        events: list[KVEvent] = []
        engine.kv_events(events.append)
        text, ids = _prompt(tok.raw)
        a, b = png(1), png(2)
        ids_a, image_a = _expanded(tok.raw, ids, a)
        ids_b, image_b = _expanded(tok.raw, ids, b)
        assert image_a.offset > BLOCK and image_a.offset + image_a.length < 2 * BLOCK
        full = (len(ids_a) - 1) // BLOCK * BLOCK  # what a repeat can find cached
        assert full >= 2 * BLOCK

        first = await _run(engine, "img-a", ids_a, [image_a])
        assert first.cached_tokens == 0 and len(first.token_ids) == 12
        again = await _run(engine, "img-a-again", ids_a, [image_a])
        assert again.token_ids == first.token_ids
        assert again.cached_tokens == full  # the image's blocks too
        other = await _run(engine, "img-b", ids_b, [image_b])
        assert other.cached_tokens == BLOCK  # the text before the image only
        assert other.token_ids != first.token_ids  # the image reached the model

        # vLLM's own handling of the text and the image: the same expanded
        # prompt (so rotor counts what vLLM counts) and the same greedy ids
        own_ids, own_a = await _vllm_own(engine, "own-a", text, a)
        assert own_ids == ids_a
        assert own_a == first.token_ids
        _, own_b = await _vllm_own(engine, "own-b", text, b)
        assert own_b == other.token_ids

        # the blocks vLLM stored for rotor's requests, relayed under rotor's
        # image-aware hashes (what the router and the mocker compute)
        mine = set(block_hashes(ids_a, BLOCK, images=[image_a]))
        mine |= set(block_hashes(ids_b, BLOCK, images=[image_b]))
        await wait_for_async(
            "the relayed events to hold the image blocks",
            lambda: mine <= _held(events),
            detail=lambda: f"{len(mine - _held(events))} of {len(mine)} missing; {events}",
        )
        # without the image's key, block 1 would have been named alike for both
        assert block_hashes(ids_a, BLOCK)[1] == block_hashes(ids_b, BLOCK)[1]
        assert block_hashes(ids_a, BLOCK)[1] not in _held(events)

        # bytes that are no image: a refusal naming the messages, not a crash
        bad = EngineImage(
            content_hash(b"nope"), image_a.offset, image_a.length, image_a.placeholder, b"nope"
        )
        with pytest.raises(EngineError) as caught:
            await _run(engine, "img-bad", ids_a, [bad])
        assert caught.value.kind == "refused" and caught.value.param == "messages"
        assert "image 0" in caught.value.message
        # the engine still answers
        assert (await _run(engine, "img-a-3", ids_a, [image_a])).token_ids == first.token_ids
    finally:
        await engine.stop()


# -- the relay, fed vLLM's own event class ---------------------------------------


def stored(hashes: list[Any], parent: Any, ids: list[int], **kw: Any) -> Any:
    from vllm.distributed.kv_events import BlockStored

    fields: dict[str, Any] = {"lora_id": None, "medium": "GPU", "lora_name": None}
    return BlockStored(
        block_hashes=hashes, parent_block_hash=parent, token_ids=ids, block_size=4, **(fields | kw)
    )


def test_the_relay_hashes_image_blocks_with_their_identifier_and_offset() -> None:
    """vLLM's events carry each block's (identifier, offset) pairs untagged
    among its extra keys; the relay names the blocks as rotor's block_hashes
    does for the same images, so two images behind the same tokens diverge
    at the first block holding image tokens, and an image that spans two
    blocks salts both (the second with a negative offset)."""
    relay = KVRelay(block_size=4)
    out: list[KVEvent] = []
    relay.listener = out.append
    tokens = [1, 2, 3, 9, 9, 9, 9, 9, 5, 6, 7, 8]  # the image: tokens[3:8]
    one = EngineImage("a" * 64, 3, 5, 9)
    two = EngineImage("b" * 64, 3, 5, 9)
    keys_one = [(("a" * 64, 3),), (("a" * 64, -1),), None]
    relay.apply(stored([b"x1", b"x2", b"x3"], None, tokens, extra_keys=keys_one))
    # msgpack gives the pairs back as lists
    keys_two = [[["b" * 64, 3]], [["b" * 64, -1]], None]
    relay.apply(stored([b"y1", b"y2", b"y3"], None, tokens, extra_keys=keys_two))
    ours_one = block_hashes(tokens, 4, images=[one])
    ours_two = block_hashes(tokens, 4, images=[two])
    assert out == [BlocksStored(1, ours_one, None, 4), BlocksStored(2, ours_two, None, 4)]
    assert len(set(ours_one) | set(ours_two)) == 6
    assert ours_one != block_hashes(tokens, 4)

    # a child block after an image: chained from its parent's image-aware name
    relay.apply(stored([b"x4"], b"x3", [4, 4, 4, 4]))
    assert out[2] == BlocksStored(
        3, block_hashes(tokens + [4] * 4, 4, images=[one])[3:], ours_one[2], 4
    )


def test_the_relay_strips_an_adapters_prefix_and_keeps_the_salt() -> None:
    """With a LoRA adapter on the vision tower vLLM names an image
    `ADAPTER:HASH`; the relay hashes the content hash (the adapter is in the
    chain's root). A salt after the image pairs is still the first block's salt."""
    from rotor.protocol.kv import chain_root

    relay = KVRelay(block_size=4)
    out: list[KVEvent] = []
    relay.listener = out.append
    tokens = [9, 9, 9, 9]
    image = EngineImage("c" * 64, 0, 4, 9)
    keys = [("sql", ("sql:" + "c" * 64, 0))]
    relay.apply(stored([b"l1"], None, tokens, lora_name="sql", extra_keys=keys))
    relay.apply(stored([b"s1"], None, tokens, extra_keys=[(("c" * 64, 0), "tenant")]))
    assert out == [
        BlocksStored(1, block_hashes(tokens, 4, lora_root("sql"), images=[image]), None, 4),
        BlocksStored(
            2, block_hashes(tokens, 4, chain_root(None, "tenant"), images=[image]), None, 4
        ),
    ]
