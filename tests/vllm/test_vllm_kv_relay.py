"""vLLM's KV events relayed as rotor's: the real engine in this process,
through the hook the mocker has (`kv_events(sink) -> KVSnapshot`), and the
relay itself fed vLLM's own event classes, a LoRA adapter's blocks chained
from its root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rotor.config import ModelConfig
from rotor.engines.registry import engine_spec
from rotor.engines.vllm.kv_relay import KVRelay
from rotor.protocol.engine import EngineOutput, EngineRequest, StopParams, pulled
from rotor.protocol.kv import (
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KVEvent,
    block_hashes,
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


async def _run(engine, rid: str, prompt: list[int]) -> list[EngineOutput]:
    request = EngineRequest(rid, "tiny", prompt, stop=StopParams(max_tokens=1, ignore_eos=True))
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

        second = await _run(engine, "kv-2", prompt)
        cached = second[0].cached_tokens
        # what the second request found cached is exactly the relayed blocks
        assert cached == BLOCK * len(stored) == 192

        other = prompt[:64] + [3] * 70  # shares two blocks with the prompt
        third = await _run(engine, "kv-3", other)
        assert third[0].cached_tokens == 2 * BLOCK
        await _until_held(events, set(expected) | set(block_hashes(other, BLOCK)))

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
    hashes: list[bytes],
    parent: bytes | None,
    ids: list[int],
    lora_id: int | None = None,
    name: str | None = None,
) -> Any:
    """vLLM's BlockStored event for blocks of 4 tokens in its GPU cache."""
    from vllm.distributed.kv_events import BlockStored

    return BlockStored(
        block_hashes=hashes,
        parent_block_hash=parent,
        token_ids=ids,
        block_size=4,
        lora_id=lora_id,
        medium="GPU",
        lora_name=name,
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
    # a CPU-offloaded copy is another tier, not this cache
    offloaded = stored([b"z"], None, [9, 9, 9, 9])
    offloaded.medium = "CPU"
    relay.apply(offloaded)
    assert len(out) == 3
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
