"""The mocker's KV handover, engine to engine (the worker's NATS fetch is
tests/runtime/test_kv_handover.py's and tests/e2e/test_disagg.py's): a
prefill pins its prompt's blocks under a transfer id (eviction cannot take
them), a fetch hands them over and unpins them, the decode engine stores
them as its own (its KV events say so, and they are evicted as any cached
block), a held prefix is not fetched again, an unfetched hold times out on
the engine's clock, a fetch short of blocks is made up here or refused when
enforced, a fetch in flight holds up nobody else and ends with its request
or the engine, and the simulated transfer takes bytes over bandwidth."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from rotor.engines.mocker import MockerEngine
from rotor.engines.mocker.config import DEFAULT_KV_BYTES_PER_TOKEN
from rotor.engines.mocker.handover import transfer_seconds
from rotor.engines.registry import kv_bytes_per_token
from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    EngineError,
    EngineOutput,
    EngineRequest,
    OutputParams,
    SamplingParams,
    StopParams,
)
from rotor.protocol.kv import BlocksRemoved, BlocksStored, KVEvent
from rotor.router import migration

from support.mocker import MakeEngine, collect, ids_of, request
from support.wait import wait_for_async

LONG = "<|im_start|>user\n" + " ".join(f"fact-{i}." for i in range(120)) + "<|im_end|>\n"
# ~360 tokens: 22 full blocks, in a cache of 48 (see the eviction tests)
MID = "<|im_start|>user\n" + " ".join(f"fact-{i}." for i in range(40)) + "<|im_end|>\n"
STORY = " ".join(f"word{i}" for i in range(30))


def wire(prefill: MockerEngine, decode: MockerEngine, asked: list[list[int]]) -> None:
    """The decode engine fetches from the prefill engine directly (the worker's
    NATS request/reply in production)."""

    async def fetch(transfer: dict, hashes: list[int]) -> list[int]:
        asked.append(hashes)
        return prefill.kv_release(transfer["transfer_id"], hashes)

    decode.kv_fetcher(fetch)


async def prefill_only(
    prefill: MockerEngine, prompt: str = LONG, **decode_extra: object
) -> tuple[EngineOutput, EngineRequest]:
    """The frontend's first stage: the prefill's one output, and the decode
    request it makes of it (the prompt and the first token, with the transfer)."""
    job = request({"output": STORY}, prompt=prompt, stop=StopParams(max_tokens=1))
    job.annotations[PREFILL_ONLY] = True
    outs = await collect(prefill, job)
    assert len(outs) == 1 and outs[0].finish == "length" and len(outs[0].token_ids) == 1
    transfer = outs[0].kv_transfer
    assert transfer is not None and transfer["engine"] == "mocker"
    rest = request({"output": STORY}, prompt=prompt, stop=StopParams(max_tokens=100))
    rest = replace(rest, token_ids=rest.token_ids + outs[0].token_ids)
    rest.annotations.update({"resume_from": 1, KV_TRANSFER: {**transfer, **decode_extra}})
    return outs[0], rest


async def prefill_then_decode(
    prefill: MockerEngine, decode: MockerEngine, prompt: str = LONG, **decode_extra: object
) -> tuple[list[int], dict]:
    """The frontend's two stages: the first token from `prefill`, the rest from `decode`."""
    first, rest = await prefill_only(prefill, prompt, **decode_extra)
    assert first.kv_transfer is not None
    return first.token_ids + ids_of(await collect(decode, rest)), first.kv_transfer


class Gate:
    """A fetcher that waits until opened (a slow prefill worker), then fetches
    from `prefill`; it records whether it was cancelled."""

    def __init__(self, prefill: MockerEngine) -> None:
        self.prefill = prefill
        self.opened = asyncio.Event()
        self.started = False
        self.cancelled = False

    async def __call__(self, transfer: dict, hashes: list[int]) -> list[int]:
        self.started = True
        try:
            await self.opened.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return self.prefill.kv_release(transfer["transfer_id"], hashes)


async def fetch_in_flight(
    make_engine: MakeEngine,
) -> tuple[MockerEngine, Gate, EngineRequest, asyncio.Task[list[EngineOutput]]]:
    """A decode engine fetching a prefill's blocks through a closed `Gate`:
    (the decode engine, the gate, its request, the task collecting it)."""
    prefill, decode = await make_engine(), await make_engine()
    gate = Gate(prefill)
    decode.kv_fetcher(gate)
    _, rest = await prefill_only(prefill)
    fetching = asyncio.create_task(collect(decode, rest))
    await wait_for_async("the fetch to start", lambda: gate.started)
    return decode, gate, rest, fetching


async def test_the_answer_is_the_aggregated_one_and_the_blocks_move(
    make_engine: MakeEngine,
) -> None:
    prefill, decode, alone = await make_engine(), await make_engine(), await make_engine()
    events: list[KVEvent] = []
    decode.kv_events(events.append)
    asked: list[list[int]] = []
    wire(prefill, decode, asked)
    ids, transfer = await prefill_then_decode(prefill, decode)
    whole = ids_of(await collect(alone, request({"output": STORY}, prompt=LONG)))
    assert ids == whole
    hashes = transfer["block_hashes"]
    assert len(hashes) == transfer["prompt_tokens"] // 16 and len(hashes) > 10
    assert asked == [hashes]  # the decode engine held none of them
    assert prefill.state().kv_blocks_pinned == 0  # the fetch ended the hold
    assert decode.state().kv_blocks_fetched == len(hashes)
    stored = [h for e in events if isinstance(e, BlocksStored) for h in e.block_hashes]
    assert stored[: len(hashes)] == hashes  # the router learns of them as stored


async def test_a_prefill_holds_its_blocks_until_fetched_or_timed_out(
    make_engine: MakeEngine,
) -> None:
    prefill = await make_engine(kv_hold_timeout_s=5)
    now = [100.0]
    prefill.holds.clock = lambda: now[0]
    job = request(None, prompt=LONG, stop=StopParams(max_tokens=1))
    job.annotations[PREFILL_ONLY] = True
    transfer = (await collect(prefill, job))[0].kv_transfer
    assert transfer is not None
    pinned = len(transfer["block_hashes"])
    assert prefill.state().kv_blocks_pinned == pinned
    # pinned blocks are out of the free list: nothing can evict them
    assert prefill.state().kv_blocks_free == prefill.state().kv_blocks_total - pinned
    now[0] += 4.9
    assert prefill.state().kv_blocks_pinned == pinned
    now[0] += 0.2
    state = prefill.state()
    assert (state.kv_blocks_pinned, state.kv_hold_timeouts) == (0, 1)
    assert prefill.kv_release(transfer["transfer_id"], transfer["block_hashes"]) == []


async def test_a_held_prefix_is_not_fetched_again(make_engine: MakeEngine) -> None:
    prefill, decode = await make_engine(), await make_engine()
    asked: list[list[int]] = []
    wire(prefill, decode, asked)
    await prefill_then_decode(prefill, decode, LONG + "<|im_start|>user\nfirst<|im_end|>\n")
    await prefill_then_decode(prefill, decode, LONG + "<|im_start|>user\nagain<|im_end|>\n")
    assert len(asked) == 2 and 0 < len(asked[1]) < len(asked[0]) - 10
    assert prefill.state().kv_blocks_pinned == 0


async def test_a_failed_fetch_is_computed_here_unless_enforced(make_engine: MakeEngine) -> None:
    prefill, decode = await make_engine(), await make_engine()

    async def broken(transfer: dict, hashes: list[int]) -> list[int]:
        raise TimeoutError("no answer")

    decode.kv_fetcher(broken)
    ids, _ = await prefill_then_decode(prefill, decode)
    assert len(ids) > 20  # the whole answer all the same
    assert (decode.state().kv_fetch_failures, decode.state().kv_blocks_fetched) == (1, 0)
    with pytest.raises(EngineError) as e:
        await prefill_then_decode(prefill, decode, LONG.replace("fact", "item"), enforce=True)
    assert e.value.cause == "kv_transfer"
    assert decode.state().kv_fetch_failures == 2


async def test_the_transfer_takes_bytes_over_bandwidth(make_engine: MakeEngine) -> None:
    prefill = await make_engine()
    decode = await make_engine(speedup_ratio=2, kv_transfer_gbps=10, kv_bytes_per_token=1_000_000)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    decode.fetcher.sleep = decode.step_loop.sleep = sleep  # the transfer's wait, and the steps'
    wire(prefill, decode, [])
    _, transfer = await prefill_then_decode(prefill, decode)
    tokens = len(transfer["block_hashes"]) * 16
    assert slept[0] == pytest.approx(tokens * 1_000_000 / 10e9 / 2)
    assert transfer_seconds(tokens, 1_000_000, 0, 2) == 0  # bandwidth 0: instant


async def test_pinned_blocks_outlast_a_full_cache_and_a_release_frees_them(
    make_engine: MakeEngine,
) -> None:
    prefill = await make_engine(num_kv_blocks=48)
    first, _ = await prefill_only(prefill, MID)
    transfer = first.kv_transfer
    assert transfer is not None
    pinned = transfer["block_hashes"]
    assert prefill.state().kv_blocks_pinned == len(pinned) > 10
    kv = prefill.scheduler.kv
    for i in range(4):  # other prompts that want every free block of the cache
        other = MID.replace("fact", f"other{i}")
        await collect(prefill, request({"output": "x"}, prompt=other))
    assert all(h in kv.hash_to_block for h in pinned)  # eviction could not take them
    assert prefill.kv_release("no-such-transfer", pinned) == []
    # hashes [] (the frontend: nobody will fetch): released, nothing handed over
    assert prefill.kv_release(transfer["transfer_id"], []) == []
    assert prefill.state().kv_blocks_pinned == 0
    assert all(h in kv.hash_to_block for h in pinned)  # still cached for reuse
    assert prefill.kv_release(transfer["transfer_id"], pinned) == []  # released once


async def test_fetched_blocks_are_cached_blocks_eviction_can_take(
    make_engine: MakeEngine,
) -> None:
    prefill, decode = await make_engine(), await make_engine(num_kv_blocks=48)
    events: list[KVEvent] = []
    decode.kv_events(events.append)
    wire(prefill, decode, [])
    _, transfer = await prefill_then_decode(prefill, decode, MID)
    hashes = transfer["block_hashes"]
    first_stored = next(e for e in events if isinstance(e, BlocksStored))
    assert first_stored.parent_hash is None and first_stored.block_hashes == hashes
    kv = decode.scheduler.kv
    assert all(h in kv.hash_to_block for h in hashes)
    for i in range(4):
        await collect(decode, request({"output": "x"}, prompt=MID.replace("fact", f"o{i}")))
    removed = {h for e in events if isinstance(e, BlocksRemoved) for h in e.block_hashes}
    assert set(hashes) & removed and not any(h in kv.hash_to_block for h in set(hashes) & removed)


async def test_blocks_not_handed_over_are_computed_here_unless_enforced(
    make_engine: MakeEngine,
) -> None:
    prefill, decode, alone = await make_engine(), await make_engine(), await make_engine()

    async def half(transfer: dict, hashes: list[int]) -> list[int]:
        return prefill.kv_release(transfer["transfer_id"], hashes)[: len(hashes) // 2]

    decode.kv_fetcher(half)
    ids, transfer = await prefill_then_decode(prefill, decode)
    assert ids == ids_of(await collect(alone, request({"output": STORY}, prompt=LONG)))
    state = decode.state()
    assert (state.kv_blocks_fetched, state.kv_fetch_failures) == (
        len(transfer["block_hashes"]) // 2,
        1,
    )
    assert prefill.state().kv_blocks_pinned == 0  # any fetch ends the hold
    with pytest.raises(EngineError) as e:
        await prefill_then_decode(prefill, decode, LONG.replace("fact", "item"), enforce=True)
    assert (e.value.kind, e.value.cause) == ("unavailable", "kv_transfer")
    assert decode.state().active_requests == 0


async def test_a_fetch_in_flight_holds_up_no_other_request(make_engine: MakeEngine) -> None:
    decode, gate, rest, fetching = await fetch_in_flight(make_engine)
    other = await collect(decode, request({"output": "meanwhile"}))
    assert other[-1].finish is not None and not fetching.done()
    assert decode.state().active_requests == 1  # the one fetching
    gate.opened.set()
    outs = await fetching
    assert outs[-1].finish is not None and decode.state().kv_blocks_fetched > 10


async def test_a_reader_that_leaves_mid_fetch_ends_the_fetch(make_engine: MakeEngine) -> None:
    decode, gate, rest, fetching = await fetch_in_flight(make_engine)
    fetching.cancel()  # as the worker does on an abort
    await wait_for_async("the fetch to be cancelled", lambda: gate.cancelled)
    await asyncio.gather(fetching, return_exceptions=True)
    assert decode.state().active_requests == 0
    assert decode.state().kv_blocks_fetched == 0
    # the request id is free again: nothing of it is left behind
    assert (await collect(decode, request({"output": "ok"}, rid=rest.request_id)))[-1].finish


async def test_an_abort_mid_fetch_applies_once_it_is_done(make_engine: MakeEngine) -> None:
    decode, gate, rest, fetching = await fetch_in_flight(make_engine)
    decode.abort(rest.request_id)
    gate.opened.set()
    assert await fetching == []  # aborted: no output at all
    assert decode.state().active_requests == 0


async def test_stopping_the_engine_mid_fetch_refuses_the_request(
    make_engine: MakeEngine,
) -> None:
    decode, gate, rest, fetching = await fetch_in_flight(make_engine)
    await decode.stop()
    with pytest.raises(EngineError) as e:
        await fetching
    assert e.value.kind == "unavailable" and gate.cancelled


def test_bytes_per_token_come_from_the_models_config(tmp_path: Path) -> None:
    config = {
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "hidden_size": 2048,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert kv_bytes_per_token(str(tmp_path)) == 28 * 2 * 8 * 128 * 2  # head dim 2048 / 16
    config.update(head_dim=256, torch_dtype="float32")
    del config["num_key_value_heads"]  # every attention head has its own KV
    (tmp_path / "config.json").write_text(json.dumps({"text_config": config}))
    assert kv_bytes_per_token(str(tmp_path)) == 28 * 2 * 16 * 256 * 4
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 2048}))
    assert kv_bytes_per_token(str(tmp_path)) == DEFAULT_KV_BYTES_PER_TOKEN
    assert kv_bytes_per_token(None) == DEFAULT_KV_BYTES_PER_TOKEN


async def test_a_seeded_answer_decoded_after_a_remote_prefill_is_the_aggregated_one(
    make_engine: MakeEngine,
) -> None:
    """Seeded (unscripted) output and its logprobs go on where the prefill's
    first token left them, the decode request built as the frontend builds it."""
    prefill, decode, alone = await make_engine(), await make_engine(), await make_engine()
    wire(prefill, decode, [])
    whole = request(
        None,
        prompt=LONG,
        sampling=SamplingParams(seed=7),
        stop=StopParams(max_tokens=40, ignore_eos=True),
        output=OutputParams(logprobs=True, top_logprobs=3),
    )
    job = replace(
        whole,
        request_id="seeded-p",
        stop=replace(whole.stop, max_tokens=1),
        annotations={PREFILL_ONLY: True},
    )
    (first,) = await collect(prefill, job)
    assert first.kv_transfer is not None
    progress = migration.Progress()
    progress.add(first)
    transfer = {**first.kv_transfer, "worker": "prefill"}
    rest = migration.resumed(whole, progress, "seeded-d", {KV_TRANSFER: transfer})
    split = [first, *await collect(decode, rest)]
    together = await collect(alone, whole)
    assert ids_of(split) == ids_of(together) and len(ids_of(together)) == 40
    assert [lp for o in split for lp in o.logprobs or ()] == [
        lp for o in together for lp in o.logprobs or ()
    ]
    assert decode.state().kv_blocks_fetched == len(transfer["block_hashes"])
