"""The mocker's simulation seen from outside: prefix reuse, preemption, chunked
prefill, batching and simulated time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.protocol.engine import EngineRequest, SamplingParams, StopParams, pulled

from support.clock import FakeClock
from support.mocker import EOS, TOK, MakeEngine, collect, ids_of, request

SYSTEM = "<|im_start|>system\nYou are a helpful assistant. Answer briefly.<|im_end|>\n"


# -- prefix reuse -------------------------------------------------------------------


async def test_repeated_prompt_reuses_cached_blocks(make_engine: MakeEngine) -> None:
    engine = await make_engine(block_size=4)
    prompt = SYSTEM + "<|im_start|>user\nWhat is the weather like in Paris?<|im_end|>\n"
    length = len(TOK.encode(prompt))
    first = await collect(engine, request({"output": "Sunny."}, prompt))
    assert first[0].cached_tokens == 0
    assert all(o.cached_tokens is None for o in first[1:])  # reported once, on the first output
    assert engine.state().kv_blocks_cached > 0
    again = await collect(engine, request({"output": "Sunny."}, prompt))
    # Every full block is reused except that the last token is always computed.
    assert again[0].cached_tokens == (length - 1) // 4 * 4 > 0
    assert ids_of(again) == ids_of(first)


async def test_shared_prefix_hits_only_its_blocks(make_engine: MakeEngine) -> None:
    engine = await make_engine(block_size=4)
    shared = TOK.encode(SYSTEM)
    await collect(engine, request({"output": "x"}, SYSTEM + "<|im_start|>user\nHello, world!"))
    outs = await collect(
        engine, request({"output": "x"}, SYSTEM + "<|im_start|>user\nHow are you today?")
    )
    cached = outs[0].cached_tokens
    assert cached is not None and cached % 4 == 0
    assert (
        len(shared) // 4 * 4 <= cached < len(TOK.encode(SYSTEM + "<|im_start|>user\nHow are you"))
    )
    unrelated = await collect(
        engine, request({"output": "x"}, "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42")
    )
    assert unrelated[0].cached_tokens == 0


async def test_n_choices_share_prompt_blocks(make_engine: MakeEngine) -> None:
    engine = await make_engine(block_size=4, num_kv_blocks=100)
    prompt = SYSTEM * 3
    prompt_blocks = len(TOK.encode(prompt)) // 4
    assert prompt_blocks >= 10
    gen = pulled(engine.generate(request({"output": "The quick brown fox " * 4}, prompt, n=2)))
    first = await gen.__anext__()
    state = engine.state()
    used = state.kv_blocks_total - state.kv_blocks_free
    assert used <= prompt_blocks + 4  # two private copies would need 2 * prompt_blocks
    assert first.cached_tokens == 0  # the request's own prompt was not cached before
    await gen.aclose()


# -- preemption ---------------------------------------------------------------------


async def test_preemption_under_a_tiny_cache_completes_every_request(
    make_engine: MakeEngine,
) -> None:
    engine = await make_engine(num_kv_blocks=12, block_size=4)
    texts = [
        f"Answer {i}: the quick brown fox jumps over the lazy dog {i} times." for i in range(8)
    ]
    reqs = [request({"output": text}, f"Question {i}?") for i, text in enumerate(texts)]
    for req, text in zip(reqs, texts, strict=True):
        assert len(req.token_ids) + len(TOK.encode(text)) + 1 < 48  # each fits alone
    results = await asyncio.gather(*(collect(engine, req) for req in reqs))
    for outs, text in zip(results, texts, strict=True):
        assert ids_of(outs) == TOK.encode(text) + [EOS]  # nothing repeated, nothing lost
        assert [o.finish for o in outs] == [None] * (len(outs) - 1) + ["eos"]
    state = engine.state()
    assert state.preemptions > 0
    assert (state.running, state.waiting, state.active_requests) == (0, 0, 0)
    assert state.kv_blocks_free == state.kv_blocks_total == 12


async def test_preemption_keeps_seeded_output(make_engine: MakeEngine) -> None:
    stop = StopParams(max_tokens=30, ignore_eos=True)
    alone = await make_engine()
    crowded = await make_engine(num_kv_blocks=12, block_size=4)

    def reqs() -> list[EngineRequest]:
        return [
            request(prompt=f"Q{i}", stop=stop, sampling=SamplingParams(seed=i)) for i in range(6)
        ]

    expected = [ids_of(await collect(alone, r)) for r in reqs()]
    got = await asyncio.gather(*(collect(crowded, r) for r in reqs()))
    assert [ids_of(outs) for outs in got] == expected
    assert crowded.state().preemptions > 0


async def test_max_num_seqs_limits_the_running_batch(make_engine: MakeEngine) -> None:
    engine = await make_engine(max_num_seqs=2)
    gens = [pulled(engine.generate(request({"output": "word " * 50}, f"Q{i}"))) for i in range(5)]
    firsts = [asyncio.ensure_future(g.__anext__()) for g in gens]
    await asyncio.wait(firsts, return_when=asyncio.FIRST_COMPLETED)
    state = engine.state()
    assert state.running == 2 and state.waiting == 3
    for fut in firsts:
        fut.cancel()
    await asyncio.gather(*firsts, return_exceptions=True)
    for g in gens:
        await g.aclose()


# -- chunked prefill --------------------------------------------------------------


async def test_long_prompt_is_prefilled_in_chunks(make_engine: MakeEngine) -> None:
    engine = await make_engine(max_num_batched_tokens=32)
    req = request({"output": ""}, SYSTEM * 8)
    length = len(req.token_ids)
    assert length > 3 * 32
    outs = await collect(engine, req)
    assert [(o.token_ids, o.finish) for o in outs] == [([EOS], "eos")]
    # One step per 32-token chunk; the last chunk's step samples the EOS.
    assert engine.state().steps == -(-length // 32)


async def test_decodes_batch_with_a_chunked_prefill(make_engine: MakeEngine) -> None:
    engine = await make_engine(max_num_batched_tokens=16)
    short = request({"output": "one two three four five six seven eight nine ten"}, "Hi")
    long = request({"output": "done"}, SYSTEM * 4)
    short_outs, long_outs = await asyncio.gather(collect(engine, short), collect(engine, long))
    assert ids_of(short_outs) == TOK.encode("one two three four five six seven eight nine ten") + [
        EOS
    ]
    assert ids_of(long_outs) == TOK.encode("done") + [EOS]
    # Had the long prefill run alone, it would add one step per chunk.
    alone = len(short_outs) + -(-len(long.token_ids) // 16) + len(long_outs)
    assert engine.state().steps < alone


# -- simulated time -----------------------------------------------------------------


def _timed_config(ratio: float, decode_ms: float) -> dict[str, Any]:
    return {
        "speedup_ratio": ratio,
        "decode_ms_per_step": decode_ms,
        "prefill_overhead_ms": 0.0,
        "prefill_ms_per_token": 0.0,
    }


def _script(decode_steps: int) -> dict[str, Any]:
    """A script whose request takes one prefill step, then `decode_steps` decode steps."""
    ids = TOK.encode("x " * 60)[:decode_steps]  # + EOS
    text = TOK.decode(ids)
    assert len(TOK.encode(text)) == decode_steps
    return {"output": text}


async def _timed_run(engine: MockerEngine, decode_steps: int) -> float:
    start = time.perf_counter()
    outs = await collect(engine, request(_script(decode_steps), "Hi"))
    elapsed = time.perf_counter() - start
    assert len(outs) == decode_steps + 1
    return elapsed


def _fake_sleep(engine: MockerEngine) -> tuple[list[float], FakeClock]:
    """The step loop's sleeps recorded instead of slept (a turn of the loop
    in their place), on a fake clock that moves by what it asked and by
    nothing else: the list of what it asked, and the clock."""
    sleeps: list[float] = []
    clock = FakeClock(100.0)

    async def record(seconds: float) -> None:
        sleeps.append(seconds)
        clock.now += seconds
        await asyncio.sleep(0)

    engine.step_loop.sleep, engine.step_loop.clock = record, clock
    return sleeps, clock


async def _recorded_sleeps(engine: MockerEngine, decode_steps: int) -> list[float]:
    """What the step loop asked to sleep, one entry per step (without sleeping)."""
    sleeps, _ = _fake_sleep(engine)
    outs = await collect(engine, request(_script(decode_steps), "Hi"))
    assert len(outs) == decode_steps + 1
    return sleeps


async def test_speedup_ratio_scales_sleep(make_engine: MakeEngine) -> None:
    slow = await make_engine(**_timed_config(1.0, 100.0))
    fast = await make_engine(**_timed_config(10.0, 100.0))
    slow_sleeps = await _recorded_sleeps(slow, 20)
    fast_sleeps = await _recorded_sleeps(fast, 20)
    # Simulated time does not depend on the ratio; only the sleeping does.
    assert slow.state().simulated_ms == pytest.approx(2000.0)
    assert fast.state().simulated_ms == pytest.approx(2000.0)
    # One sleep per step: the (free) prefill, then 20 decode steps of 100 ms each.
    assert slow_sleeps == pytest.approx([0.0] + [0.1] * 20)
    assert fast_sleeps == pytest.approx([s / 10 for s in slow_sleeps])
    assert sum(slow_sleeps) == pytest.approx(slow.state().simulated_ms / 1000)


@pytest.mark.parametrize(("work_ms", "expected_ms"), [(30.0, 70.0), (150.0, 0.0)])
async def test_a_pushed_readers_work_does_not_lengthen_the_steps(
    make_engine: MakeEngine, work_ms: float, expected_ms: float
) -> None:
    """A reader that takes the outputs pushed (its work done in the engine's
    turn) overlaps the next step, as a device computes while the frontend
    streams: a 100 ms step after 30 ms of such work waits 70 ms more; after
    150 ms (the frontend is the bottleneck) it waits no more and the steps
    after it keep their own pace from then, with no burst to catch up."""
    engine = await make_engine(**_timed_config(1.0, 100.0))
    sleeps, clock = _fake_sleep(engine)

    class Slow:
        ended_ = asyncio.get_running_loop().create_future()

        def put(self, item: Any) -> bool:
            clock.now += work_ms / 1000  # the frontend's work on this step's output
            return True

        def end(self, error: Any) -> None:
            self.ended_.set_result(None)

    stream = pulled(engine.generate(request(_script(6), "Hi")))
    await stream.__anext__()  # the prefill's token, read
    reader = Slow()
    stream.subscribe(reader)  # the switch: the rest pushed
    await reader.ended_
    decode_sleeps = sleeps[1:]  # the prefill's step was free
    assert decode_sleeps[0] == pytest.approx(0.1)  # nothing pushed yet: the whole step
    assert decode_sleeps[1:] == pytest.approx([expected_ms / 1000] * (len(decode_sleeps) - 1))


async def test_steps_really_sleep(make_engine: MakeEngine) -> None:
    engine = await make_engine(**_timed_config(1.0, 20.0))
    assert await _timed_run(engine, 5) >= 0.1 * 0.9  # sleeping never takes less than asked


async def test_speedup_zero_never_sleeps(
    make_engine: MakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = await make_engine(**_timed_config(0.0, 1000.0))
    real_sleep = asyncio.sleep
    asked: list[float] = []  # any asyncio.sleep besides the step loop's own

    async def recorded(delay: float, result: Any = None) -> Any:
        asked.append(delay)
        return await real_sleep(0, result)

    monkeypatch.setattr(asyncio, "sleep", recorded)
    sleeps = await _recorded_sleeps(engine, 50)
    assert engine.state().simulated_ms == pytest.approx(50_000.0)  # 50 s simulated
    # Only the loop's turn after each step (step_slice_ms 0): never a wait.
    assert all(delay == 0 for delay in asked), asked
    assert sleeps == [0] * engine.state().steps


async def test_decode_cost_grows_mildly_with_batch() -> None:
    config = MockerConfig()
    one, many = config.step_ms(0, 1), config.step_ms(0, 256)
    assert one == pytest.approx(10.0)
    assert one < many < 4 * one
    assert config.step_ms(1000, 0) > config.step_ms(10, 0) > 0


# -- steps back to back at speedup 0 -----------------------------------------------


def _step_clock(engine: MockerEngine, seconds: float) -> Callable[[], float]:
    """A clock on which every step of `engine` takes `seconds`."""
    return lambda: engine.step_loop.steps * seconds


async def _sizes(engine: MockerEngine, make_engine: MakeEngine, decode_steps: int) -> list[int]:
    """How many tokens each output carried; the answer is the one a step at a
    time gives."""
    outs = await collect(engine, request(_script(decode_steps), "Hi"))
    lockstep = await collect(await make_engine(), request(_script(decode_steps), "Hi"))
    assert ids_of(outs) == ids_of(lockstep)
    assert outs[-1].finish == lockstep[-1].finish == "eos"
    return [len(o.token_ids) for o in outs]


@pytest.mark.parametrize(
    ("step_s", "sizes"),
    [
        (0.0002, [1, 5, 5, 5, 5]),  # 5 steps fill the 1 ms slice
        (0.002, [1, 4, 4, 4, 4, 4]),  # steps longer than the slice: still 4 a slice
    ],
)
async def test_steps_run_back_to_back_for_a_slice_and_their_tokens_arrive_together(
    make_engine: MakeEngine, step_s: float, sizes: list[int]
) -> None:
    engine = await make_engine(step_slice_ms=1.0)
    engine.step_loop.clock = _step_clock(engine, step_s)
    # The first token alone (it ends its slice early), then a slice's steps at a time.
    assert await _sizes(engine, make_engine, 20) == sizes


async def test_a_first_token_is_sent_before_any_further_step(make_engine: MakeEngine) -> None:
    engine = await make_engine(step_slice_ms=1.0)
    engine.step_loop.clock = lambda: 0.0  # the slice never runs out
    for _ in range(2):  # the second starts inside the slice the first left
        assert await _sizes(engine, make_engine, 30) == [1, 30]


async def test_a_first_token_ends_a_slice_early_only_once_in_a_row(
    make_engine: MakeEngine,
) -> None:
    """Under load nearly every step starts an answer: were each first token to
    end its slice, the engine would be back to a step at a time."""
    engine = await make_engine(step_slice_ms=1.0, max_num_batched_tokens=16)
    engine.step_loop.clock = lambda: 0.0  # the slice never runs out
    short = request(_script(10), "Hi")  # prefilled in its first step
    long = request(_script(10), "word " * 40)  # prefilled in chunks over 3 steps
    got: dict[str, list[int]] = {}

    async def read(req: EngineRequest) -> None:
        got[req.request_id] = [len(o.token_ids) async for o in pulled(engine.generate(req))][:1]

    await asyncio.gather(read(short), read(long))
    # The short answer's first token ended the first slice; the long one's,
    # two steps later, did not end the next: it came with the tokens after it.
    assert got[short.request_id] == [1]
    assert got[long.request_id][0] > 1


async def test_a_slice_of_zero_hands_the_loop_every_step(make_engine: MakeEngine) -> None:
    engine = await make_engine(step_slice_ms=0)
    engine.step_loop.clock = lambda: 0.0
    assert await _sizes(engine, make_engine, 12) == [1] * 13
