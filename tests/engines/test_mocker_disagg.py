"""The mocker's KV handover, engine to engine (the worker's NATS fetch is
tests/e2e/test_disagg.py's): a prefill pins its prompt's blocks under a
transfer id, a fetch hands them over and unpins them, the decode engine
stores them as its own (its KV events say so), a held prefix is not fetched
again, an unfetched hold times out on the engine's clock, and the simulated
transfer takes bytes over bandwidth."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rotor.engines.mocker import MockerEngine
from rotor.engines.mocker.handover import transfer_seconds
from rotor.protocol.engine import KV_TRANSFER, PREFILL_ONLY, EngineError, StopParams
from rotor.protocol.kv import BlocksStored, KVEvent

from support.mocker import MakeEngine, collect, ids_of, request

LONG = "<|im_start|>user\n" + " ".join(f"fact-{i}." for i in range(120)) + "<|im_end|>\n"
STORY = " ".join(f"word{i}" for i in range(30))


def wire(prefill: MockerEngine, decode: MockerEngine, asked: list[list[int]]) -> None:
    """The decode engine fetches from the prefill engine directly (the worker's
    NATS request/reply in production)."""

    async def fetch(transfer: dict, hashes: list[int]) -> list[int]:
        asked.append(hashes)
        return prefill.kv_release(transfer["transfer_id"], hashes)

    decode.kv_fetcher(fetch)


async def prefill_then_decode(
    prefill: MockerEngine, decode: MockerEngine, prompt: str = LONG, **decode_extra: object
) -> tuple[list[int], dict]:
    """The frontend's two stages: the first token from `prefill`, the rest from `decode`."""
    job = request({"output": STORY}, prompt=prompt, stop=StopParams(max_tokens=1))
    job.annotations[PREFILL_ONLY] = True
    first = await collect(prefill, job)
    assert len(first) == 1 and first[0].finish == "length" and len(first[0].token_ids) == 1
    transfer = first[0].kv_transfer
    assert transfer is not None and transfer["engine"] == "mocker"
    rest = request({"output": STORY}, prompt=prompt, stop=StopParams(max_tokens=100))
    rest = replace(rest, token_ids=rest.token_ids + first[0].token_ids)
    rest.annotations.update({"resume_from": 1, KV_TRANSFER: {**transfer, **decode_extra}})
    return first[0].token_ids + ids_of(await collect(decode, rest)), transfer


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

    decode._sleep = sleep
    wire(prefill, decode, [])
    _, transfer = await prefill_then_decode(prefill, decode)
    tokens = len(transfer["block_hashes"]) * 16
    assert slept[0] == pytest.approx(tokens * 1_000_000 / 10e9 / 2)
    assert transfer_seconds(tokens, 1_000_000, 0, 2) == 0  # bandwidth 0: instant
