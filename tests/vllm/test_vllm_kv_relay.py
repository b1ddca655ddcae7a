"""vLLM's KV events relayed as rotor's: the real engine in this process,
through the hook the mocker has (`kv_events(sink) -> KVSnapshot`), and the
relay itself fed vLLM's own event classes, a LoRA adapter's blocks chained
from its root."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from rotor.config import ModelConfig
from rotor.engines.registry import engine_spec
from rotor.engines.vllm.kv_relay import KVRelay
from rotor.protocol.engine import (
    EngineError,
    EngineImage,
    EngineOutput,
    EngineRequest,
    StopParams,
    pulled,
)
from rotor.protocol.kv import (
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KVEvent,
    block_hashes,
    chain_root,
    lora_root,
)
from rotor.serve.build import build_engine, load

from support.llama import add_llama_weights
from support.models import chatml_model
from support.vllm_setup import VLLM_ARGS, VLLM_ENV
from support.wait import wait_for_async

BLOCK = 32


def _replay(events: list[KVEvent]) -> set[int]:
    held: set[int] = set()
    for e in events:
        if isinstance(e, BlocksStored):
            held.update(e.block_hashes)
        elif isinstance(e, BlocksRemoved):
            held.difference_update(e.block_hashes)
        elif isinstance(e, AllCleared):
            held.clear()
    return held


async def _run(engine, rid: str, prompt: list[int], salt: str | None = None) -> list[EngineOutput]:
    stop = StopParams(max_tokens=1, ignore_eos=True)
    request = EngineRequest(rid, "tiny", prompt, stop=stop, cache_salt=salt)
    return [out async for out in pulled(engine.generate(request))]


async def _until_held(events: list[KVEvent], blocks: set[int]) -> None:
    """Events cross a ZMQ socket: wait until replaying them holds `blocks`
    (a count of events to wait for could already be reached, or never be)."""
    await wait_for_async(
        f"the relayed events to hold {len(blocks)} blocks",
        lambda: _replay(events) == blocks,
        detail=lambda: f"{len(_replay(events))} blocks held; events: {events}",
    )


@pytest.mark.asyncio
async def test_relayed_blocks_are_what_a_repeated_prompt_finds_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in VLLM_ENV.items():
        monkeypatch.setenv(key, value)
    model = add_llama_weights(chatml_model(tmp_path, "tiny"), 2048)
    spec = engine_spec("vllm")
    card, tok = load(ModelConfig(model_path=str(model)), spec)
    engine = build_engine(spec, card, tok, {"engine_args": list(VLLM_ARGS)})
    await engine.start()
    try:
        events: list[KVEvent] = []
        before = engine.kv_events(events.append)
        assert before.blocks == [] and before.block_size == BLOCK

        prompt = [(i * 7) % 500 + 1 for i in range(200)]  # 6 full blocks and 8 tokens
        first = await _run(engine, "kv-1", prompt)
        assert first[0].cached_tokens == 0
        expected = block_hashes(prompt, BLOCK)
        assert len(expected) == 6
        # every stored block is a full block of the prompt, named by rotor's hash
        await _until_held(events, set(expected))
        stored = _replay(events)
        assert all(isinstance(e, BlocksStored) and e.block_size == BLOCK for e in events)

        # a text-only model: a prompt with an image is refused, naming the messages
        assert not engine.card.capabilities.images
        image = EngineImage("d" * 64, 0, 4, 7, b"\x89PNG")
        request = EngineRequest("kv-image", "tiny", prompt, images=[image])
        with pytest.raises(EngineError) as caught:
            [out async for out in pulled(engine.generate(request))]
        assert caught.value.kind == "refused" and caught.value.param == "messages"
        assert "text only" in caught.value.message

        second = await _run(engine, "kv-2", prompt)
        cached = second[0].cached_tokens
        # what the second request found cached is exactly the relayed blocks
        assert cached == BLOCK * len(stored) == 192

        other = prompt[:64] + [3] * 70  # shares two blocks with the prompt
        third = await _run(engine, "kv-3", other)
        assert third[0].cached_tokens == 2 * BLOCK
        await _until_held(events, set(expected) | set(block_hashes(other, BLOCK)))

        # a tenant's salt: the same prompt finds nothing of the unsalted one's
        # cache, and its blocks are relayed under the salted root
        tenant = await _run(engine, "kv-salted", prompt, "tenant-a")
        assert tenant[0].cached_tokens == 0
        salted = block_hashes(prompt, BLOCK, chain_root(None, "tenant-a"))
        held = set(expected) | set(block_hashes(other, BLOCK)) | set(salted)
        await _until_held(events, held)
        again = await _run(engine, "kv-salted-2", prompt, "tenant-a")
        assert again[0].cached_tokens == 192

        # the snapshot rebuilds what the events built, parents first
        snap = engine.kv_events(None)
        assert {h for h, _ in snap.blocks} == _replay(events)
        seen: set[int] = set()
        for h, parent in snap.blocks:
            assert parent is None or parent in seen
            seen.add(h)
        assert snap.event_id == len(events)

        engine.kv_events(events.append)
        assert await engine.llm.reset_prefix_cache()
        # vLLM publishes a step's events after the step: the next request's
        # step carries the clear, then what that request stored
        fourth = await _run(engine, "kv-4", other)
        assert fourth[0].cached_tokens == 0
        await _until_held(events, set(block_hashes(other, BLOCK)))
        assert isinstance(events[snap.event_id], AllCleared)
        assert {h for h, _ in engine.kv_events(None).blocks} == _replay(events)
    finally:
        await engine.stop()


def stored(
    hashes: list[Any],
    parent: bytes | None,
    ids: list[int],
    lora_id: int | None = None,
    name: str | None = None,
    medium: str | None = "GPU",
    extra_keys: list[tuple[Any, ...] | None] | None = None,
) -> Any:
    """vLLM's BlockStored event for blocks of 4 tokens in its GPU cache (or
    another `medium`, as its offloading connector's self-describing events
    fill it)."""
    from vllm.distributed.kv_events import BlockStored

    return BlockStored(
        block_hashes=hashes,
        parent_block_hash=parent,
        token_ids=ids,
        block_size=4,
        lora_id=lora_id,
        medium=medium,
        lora_name=name,
        extra_keys=extra_keys,
    )


def test_relay_names_blocks_by_rotor_hash_and_counts_copies() -> None:
    from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved

    relay = KVRelay(block_size=4)
    out: list[KVEvent] = []
    relay.listener = out.append
    tokens = list(range(1, 13))
    mine = block_hashes(tokens, 4)

    relay.apply(stored([b"a", b"b"], None, tokens[:8]))
    relay.apply(stored([b"c"], b"b", tokens[8:12]))
    assert out == [BlocksStored(1, mine[:2], None, 4), BlocksStored(2, [mine[2]], mine[1], 4)]
    # a second physical copy of block "c": nothing new is findable
    relay.apply(stored([b"c"], b"b", tokens[8:12]))
    assert len(out) == 2
    relay.apply(BlockRemoved(block_hashes=[b"c"], medium="GPU"))
    assert len(out) == 2  # one copy is left
    relay.apply(BlockRemoved(block_hashes=[b"c", b"b"], medium="GPU"))
    assert out[2:] == [BlocksRemoved(3, [mine[2], mine[1]])]
    assert relay.snapshot().blocks == [(mine[0], None)]
    relay.apply(stored([b"b"], b"a", tokens[4:8]))
    assert out[3] == BlocksStored(4, [mine[1]], mine[0], 4)
    relay.apply(AllBlocksCleared())
    assert out[4] == AllCleared(5)
    assert relay.snapshot().blocks == [] and relay.snapshot().event_id == 5


def test_the_relay_chains_an_adapters_blocks_from_its_root() -> None:
    names = {7: "sql"}
    relay = KVRelay(block_size=4, lora_names=names.get)
    out: list[KVEvent] = []
    relay.listener = out.append
    tokens = list(range(1, 9))

    other = [20, 21, 22, 23]
    sql = block_hashes(tokens, 4, lora_root("sql"))
    base = block_hashes(tokens, 4)
    chat = block_hashes(tokens, 4, lora_root("chat"))
    (by_id,) = block_hashes(other, 4, lora_root("sql"))
    assert len({*sql, *base, *chat, by_id}) == 7
    relay.apply(stored([b"s1"], None, tokens[:4], 7, "sql"))  # vLLM names it
    relay.apply(stored([b"s2"], b"s1", tokens[4:], 7, "sql"))  # a child: its parent's chain
    relay.apply(stored([b"b1", b"b2"], None, tokens, None, None))  # the base model's
    relay.apply(stored([b"c1", b"c2"], None, tokens, None, "chat"))
    relay.apply(stored([b"q1"], None, other, 7, None))  # only the id: the engine names it
    relay.apply(stored([b"u1"], None, other, 99, None))  # an id nobody knows: dropped
    assert out == [
        BlocksStored(1, [sql[0]], None, 4),  # a first block names no parent
        BlocksStored(2, [sql[1]], sql[0], 4),
        BlocksStored(3, base, None, 4),
        BlocksStored(4, chat, None, 4),
        BlocksStored(5, [by_id], None, 4),
    ]
    assert relay.num_cached == 7
    snapshot = dict(relay.snapshot().blocks)
    assert snapshot[sql[1]] == sql[0] and snapshot[sql[0]] is None and snapshot[chat[1]] == chat[0]


# -- media: the offloading connectors' events --------------------------------------


class Media:
    """A router's replica of one worker: each medium's blocks, from the events."""

    def __init__(self) -> None:
        self.held: dict[str, dict[int, int | None]] = {"device": {}, "host": {}, "disk": {}}

    def __call__(self, event: KVEvent) -> None:
        if isinstance(event, BlocksStored):
            held, parent = self.held[event.medium], event.parent_hash
            for h in event.block_hashes:
                assert h not in held
                held[h], parent = parent, h
        elif isinstance(event, BlocksRemoved):
            for h in event.block_hashes:
                del self.held[event.medium][h]
        else:
            for held in self.held.values():
                held.clear()

    def of(self, relay: KVRelay) -> None:
        """The relay's snapshot says what the events built."""
        snap = relay.snapshot()
        assert dict(snap.blocks) == self.held["device"]
        for medium in ("host", "disk"):
            assert dict(snap.lower.get(medium, [])) == self.held[medium]


def removed(hashes: list[Any], medium: str | None = "GPU") -> Any:
    from vllm.distributed.kv_events import BlockRemoved

    return BlockRemoved(block_hashes=hashes, medium=medium)


def test_the_relay_chains_a_salted_first_block_from_the_salted_root() -> None:
    """vLLM publishes a first block's cache_salt among its extra keys (after
    the adapter's name, before prompt-embeds digests): the relay chains it
    from the salted root, as the router hashes a salted request."""
    relay = KVRelay(block_size=4, lora_names={7: "sql"}.get)
    out: list[KVEvent] = []
    relay.listener = out.append
    tokens = list(range(1, 9))
    salted = block_hashes(tokens, 4, chain_root(None, "tenant-a"))
    sql_salted = block_hashes(tokens[:4], 4, chain_root("sql", "tenant-a"))
    sql = block_hashes(tokens[:4], 4, lora_root("sql"))
    relay.apply(stored([b"t1", b"t2"], None, tokens, extra_keys=[("tenant-a",), None]))
    relay.apply(stored([b"l1"], None, tokens[:4], 7, "sql", extra_keys=[("sql", "tenant-a")]))
    relay.apply(stored([b"l2"], None, tokens[:4], 7, "sql", extra_keys=[("sql",)]))
    relay.apply(stored([b"e1"], None, tokens[:4], extra_keys=[("tenant-b", b"\x01" * 32)]))
    assert out == [
        BlocksStored(1, salted, None, 4),
        BlocksStored(2, sql_salted, None, 4),
        BlocksStored(3, sql, None, 4),
        BlocksStored(4, block_hashes(tokens[:4], 4, chain_root(None, "tenant-b")), None, 4),
    ]
    assert not set(salted) & set(block_hashes(tokens, 4))


def test_blocks_offloaded_and_brought_back_are_relayed_per_medium() -> None:
    """vLLM's offloading connector copies computed blocks to the CPU (its
    self-describing stores: tokens and parent, medium CPU) while the GPU
    holds them; the GPU evicts them; a prompt loads them back to the GPU,
    and the CPU keeps its copy until its own LRU evicts it. Storage tiers
    say STORAGE. Each is relayed on rotor's medium, by rotor's hash."""
    from vllm.distributed.kv_events import MEDIUM_CPU, MEDIUM_STORAGE

    relay = KVRelay(block_size=4)
    out: list[KVEvent] = []
    media = Media()
    relay.listener = lambda e: (out.append(e), media(e))  # type: ignore[func-returns-value]
    tokens = list(range(1, 13))
    mine = block_hashes(tokens, 4)

    relay.apply(stored([b"a", b"b", b"c"], None, tokens))  # computed on the GPU
    relay.apply(stored([b"a", b"b"], None, tokens[:8], medium=MEDIUM_CPU))  # a chunk offloaded
    relay.apply(stored([b"c"], b"b", tokens[8:], medium=MEDIUM_CPU))
    assert out == [
        BlocksStored(1, mine, None, 4),
        BlocksStored(2, mine[:2], None, 4, "host"),  # on both media now
        BlocksStored(3, [mine[2]], mine[1], 4, "host"),
    ]
    relay.apply(removed([b"c", b"b", b"a"]))  # the GPU evicts them: the host keeps them
    assert out[3] == BlocksRemoved(4, [mine[2], mine[1], mine[0]])
    media.of(relay)
    assert relay.num_held("host") == 3 and relay.num_cached == 0
    # a prompt finds them on the CPU: loaded back, the GPU caches them again
    relay.apply(stored([b"a", b"b"], None, tokens[:8]))
    assert out[4] == BlocksStored(5, mine[:2], None, 4)
    # a storage tier below the CPU takes "c"; the CPU's LRU then drops it
    relay.apply(stored([b"c"], b"b", tokens[8:], medium=MEDIUM_STORAGE))
    relay.apply(removed([b"c"], MEDIUM_CPU))
    assert out[5:] == [
        BlocksStored(6, [mine[2]], mine[1], 4, "disk"),
        BlocksRemoved(7, [mine[2]], "host"),
    ]
    media.of(relay)
    snap = relay.snapshot()
    assert snap.blocks == [(mine[0], None), (mine[1], mine[0])]
    assert snap.lower == {
        "host": [(mine[0], None), (mine[1], mine[0])],
        "disk": [(mine[2], mine[1])],
    }
    # a chunk announced again (a shared prefix) counts copies, as the GPU's do
    relay.apply(stored([b"a"], None, tokens[:4], medium=MEDIUM_CPU))
    relay.apply(removed([b"a"], MEDIUM_CPU))
    assert len(out) == 7
    # once no medium holds a block, it is forgotten: a child stored later is dropped
    relay.apply(removed([b"c"], MEDIUM_STORAGE))
    relay.apply(removed([b"a", b"b"], MEDIUM_CPU))
    relay.apply(removed([b"b", b"a"]))
    assert relay.snapshot().blocks == [] and relay.snapshot().lower == {}
    relay.apply(stored([b"d"], b"c", [7, 7, 7, 7], medium=MEDIUM_CPU))
    assert len(out) == 10 and relay.num_held("host") == 0
    media.of(relay)


def test_placeholder_offload_events_are_named_from_another_mediums_copy() -> None:
    """Without self-describing events vLLM's offloading connector stores a
    chunk as its last vLLM hash alone (no tokens, block size 0): the relay
    names it while it knows that hash (the GPU stored it first), with its
    parent, and drops one it cannot name. These events are made by vLLM's
    own tracker (`OffloadingEventsTracker`), as its scheduler makes them."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.events import (
        OffloadingEventsTracker,
    )
    from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash as external
    from vllm.v1.kv_offload.base import (
        Medium,
        OffloadingEvent,
        OffloadingKVEventsConfig,
        make_offload_key,
    )

    tracker = OffloadingEventsTracker(OffloadingKVEventsConfig(True, False))

    def offload(hashes: list[bytes], medium: Medium, gone: bool = False) -> list[Any]:
        keys = [make_offload_key(h, 0) for h in hashes]
        return list(tracker.take_events([OffloadingEvent(keys, medium, gone)]))

    relay = KVRelay(block_size=4)
    out: list[KVEvent] = []
    media = Media()
    relay.listener = lambda e: (out.append(e), media(e))  # type: ignore[func-returns-value]
    tokens = list(range(1, 9))
    mine = block_hashes(tokens, 4)
    # (vLLM's events name a block by its hash as an int, by default: the GPU's and these)
    relay.apply(stored([external(b"a"), external(b"b")], None, tokens))
    events = offload([b"a", b"b", b"zz"], Medium.CPU)
    assert [(e.token_ids, e.block_size, e.medium) for e in events] == [([], 0, "CPU")] * 3
    for event in events:
        relay.apply(event)
    assert out[1:] == [
        BlocksStored(2, [mine[0]], None, 4, "host"),
        BlocksStored(3, [mine[1]], mine[0], 4, "host"),  # "zz": unknown, dropped
    ]
    relay.apply(removed([external(b"b"), external(b"a")]))  # the GPU evicts; the host's stay
    for event in offload([b"b"], Medium.STORAGE):
        relay.apply(event)
    assert out[4] == BlocksStored(5, [mine[1]], mine[0], 4, "disk")
    for event in offload([b"a", b"b"], Medium.CPU, gone=True):
        relay.apply(event)
    assert out[5] == BlocksRemoved(6, mine, "host")
    media.of(relay)
    assert relay.snapshot().lower == {"disk": [(mine[1], mine[0])]}


def test_an_unknown_medium_is_dropped_with_a_debug_line(caplog: pytest.LogCaptureFixture) -> None:
    relay = KVRelay(block_size=4)
    out: list[KVEvent] = []
    relay.listener = out.append
    with caplog.at_level("DEBUG", logger="rotor.engines.vllm.kv_relay"):
        relay.apply(stored([b"a"], None, [1, 2, 3, 4], medium="NVLINK_POOL"))
        relay.apply(removed([b"a"], "NVLINK_POOL"))
    assert out == [] and relay.dropped == 2 and relay.event_id == 0
    assert "medium 'NVLINK_POOL' dropped" in caplog.text
    # vLLM's own names, whatever their case (Mooncake's store writes "cpu")
    relay.apply(stored([b"a"], None, [1, 2, 3, 4], medium="cpu"))
    relay.apply(stored([b"b"], None, [5, 5, 5, 5], medium=None))  # before media: the GPU's
    assert [e.medium for e in out if isinstance(e, BlocksStored)] == ["host", "device"]


def test_a_reset_of_the_gpu_cache_keeps_the_blocks_below() -> None:
    """vLLM's AllBlocksCleared resets its GPU prefix cache: with blocks on the
    CPU it is relayed as the device's removal, so the host's stay known."""
    from vllm.distributed.kv_events import AllBlocksCleared

    relay = KVRelay(block_size=4)
    out: list[KVEvent] = []
    media = Media()
    relay.listener = lambda e: (out.append(e), media(e))  # type: ignore[func-returns-value]
    tokens = list(range(1, 9))
    mine = block_hashes(tokens, 4)
    relay.apply(stored([b"a", b"b"], None, tokens))
    relay.apply(stored([b"a"], None, tokens[:4], medium="CPU"))
    relay.apply(AllBlocksCleared())
    assert out[2] == BlocksRemoved(3, mine)
    assert relay.snapshot().blocks == [] and relay.snapshot().lower == {"host": [(mine[0], None)]}
    media.of(relay)
    relay.apply(stored([b"b"], b"a", tokens[4:]))  # its parent is still known, from the host
    assert out[3] == BlocksStored(4, [mine[1]], mine[0], 4)
    relay.apply(removed([b"a"], "CPU"))
    relay.apply(AllBlocksCleared())
    assert out[-1] == AllCleared(6)  # nothing below: every medium is empty
    media.of(relay)


@pytest.mark.asyncio
async def test_vllms_own_publisher_stream_is_relayed_per_medium() -> None:
    """What crosses the ZMQ socket: vLLM's `ZmqEventPublisher` sends
    `KVEventBatch`es of GPU, CPU and STORAGE events in its own msgpack
    encoding, to rotor's SUB socket, and the relay's reader keeps the media."""
    import asyncio
    import time

    from vllm.distributed.kv_events import AllBlocksCleared, KVEventBatch, ZmqEventPublisher

    from rotor.engines.vllm.kv_relay import listen, relay_events

    relay = KVRelay(block_size=4)
    out: list[KVEvent] = []
    relay.listener = out.append
    sock, endpoint = listen()
    reader = asyncio.create_task(relay_events(sock, relay))
    publisher = ZmqEventPublisher(0, endpoint=endpoint)
    try:
        # a PUB socket drops what it sends before the SUB is connected: clears
        # until one comes through (more may follow it), then the stream proper
        while not out:
            publisher.publish(KVEventBatch(ts=time.time(), events=[AllBlocksCleared()]))
            await asyncio.sleep(0.05)
        tokens = list(range(1, 9))
        mine = block_hashes(tokens, 4)
        batches = [
            [stored([b"a", b"b"], None, tokens)],
            [stored([b"a", b"b"], None, tokens, medium="CPU"), removed([b"b", b"a"])],
            [stored([b"b"], b"a", tokens[4:], medium="STORAGE"), removed([b"b"], "CPU")],
        ]
        for events in batches:
            publisher.publish(KVEventBatch(ts=time.time(), events=events))

        def relayed() -> list[KVEvent]:
            return [e for e in out if not isinstance(e, AllCleared)]

        await wait_for_async(
            "the published batches to be relayed", lambda: len(relayed()) == 5, detail=relayed
        )
        start = len(out) - 5
        assert all(isinstance(e, AllCleared) for e in out[:start])  # in order: clears first
        assert out[start:] == [
            BlocksStored(start + 1, mine, None, 4),
            BlocksStored(start + 2, mine, None, 4, "host"),
            BlocksRemoved(start + 3, [mine[1], mine[0]]),
            BlocksStored(start + 4, [mine[1]], mine[0], 4, "disk"),
            BlocksRemoved(start + 5, [mine[1]], "host"),
        ]
        assert relay.lost == 0
        snap = relay.snapshot()
        assert snap.blocks == [] and snap.lower == {
            "host": [(mine[0], None)],
            "disk": [(mine[1], mine[0])],
        }
    finally:
        publisher.shutdown()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
