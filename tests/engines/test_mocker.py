"""The mocker through the Engine interface: scripts, seeded output, logprobs, n, abort."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import math
from typing import Any

import pytest

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.model.tokenizer import Tokenizer
from rotor.pipeline.preprocess import RequestError, ServedModel, prepare_completion
from rotor.protocol.engine import (
    EngineError,
    EngineOutput,
    OutputParams,
    SamplingParams,
    StopParams,
    pulled,
)
from rotor.protocol.openai import CompletionRequest

from support.mocker import CARD, EOS, TOK, MakeEngine, collect, ids_of, request
from support.sinks import Recorder
from support.wait import wait_for_async

TEXT = "The quick brown fox jumps over the lazy dog."


# -- scripted output -----------------------------------------------------------


def test_card_capabilities() -> None:
    before = dataclasses.replace(CARD, capabilities=dataclasses.replace(CARD.capabilities))
    engine = MockerEngine(CARD, TOK, MockerConfig(structural_tags=False))
    assert before == CARD  # the caller's card is not mutated
    assert CARD.capabilities.structural_tags is True
    caps = engine.card.capabilities
    assert (caps.logprobs, caps.mock_scripts, caps.structural_tags) == (True, True, False)
    assert MockerEngine(CARD, TOK, MockerConfig()).card.capabilities.structural_tags is True


def test_card_context_length_is_what_the_kv_cache_holds() -> None:
    assert CARD.context_length == 32768
    small = MockerEngine(CARD, TOK, MockerConfig(num_kv_blocks=4, block_size=4))
    assert small.card.context_length == 16  # 4 blocks of 4 tokens
    assert CARD.context_length == 32768  # the caller's card is not mutated
    big = MockerEngine(CARD, TOK, MockerConfig(num_kv_blocks=8192, block_size=16))
    assert big.card.context_length == 32768  # the model's own limit, when smaller


async def test_the_frontends_context_check_applies_to_the_kv_limit(
    make_engine: MakeEngine,
) -> None:
    engine = await make_engine(num_kv_blocks=4, block_size=4)
    served = ServedModel.build(engine.card, TOK)
    prompt_tokens = len(TOK.encode("Hello there"))
    too_long = CompletionRequest(model=CARD.name, prompt="Hello there", max_tokens=14)
    with pytest.raises(
        RequestError, match=rf"(?i)context length is 16 .*{prompt_tokens} prompt"
    ) as e:
        prepare_completion(served, too_long, "r")
    assert e.value.param == "max_tokens"
    (fits,) = prepare_completion(
        served, CompletionRequest(model=CARD.name, prompt="Hello there"), "r"
    )
    (fits_request,) = fits.requests
    assert fits_request.stop.max_tokens == 16 - prompt_tokens
    outs = await collect(engine, fits_request)  # the engine takes what the frontend let through
    assert outs[-1].finish is not None


@pytest.mark.parametrize(
    ("end", "last_token", "finish", "matched", "error"),
    [
        ("eos", EOS, "eos", EOS, None),
        ("eos_hidden", None, "eos", EOS, None),
        ("length", None, "length", None, None),
        ("stop", None, "stop", None, None),
        ("eof", None, None, None, None),
        ("error", None, "error", None, "mock: scripted error"),
    ],
)
async def test_script_ends(
    make_engine: MakeEngine,
    end: str,
    last_token: int | None,
    finish: str | None,
    matched: int | None,
    error: str | None,
) -> None:
    engine = await make_engine()
    outs = await collect(engine, request({"output": TEXT, "end": end}))
    expected = TOK.encode(TEXT) + ([last_token] if last_token is not None else [])
    assert ids_of(outs) == expected
    assert all(len(o.token_ids) == 1 for o in outs)  # default: one token per step
    assert [o.finish for o in outs[:-1]] == [None] * (len(outs) - 1)
    last = outs[-1]
    assert (last.finish, last.matched, last.error) == (finish, matched, error)
    assert engine.state().active_requests == 0


async def test_script_default_end_is_eos_and_special_tokens_become_ids(
    make_engine: MakeEngine,
) -> None:
    engine = await make_engine()
    text = "<think>hm</think>Hi<|im_end|>"
    outs = await collect(engine, request({"output": text}))
    assert ids_of(outs) == TOK.encode(text) + [EOS]
    assert TOK.token_to_id("<|im_end|>") in ids_of(outs)[:-1]
    assert (outs[-1].finish, outs[-1].matched) == ("eos", EOS)


async def test_empty_script_output(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    outs = await collect(engine, request({"output": "", "end": "eos_hidden"}))
    assert [(o.token_ids, o.finish, o.matched) for o in outs] == [([], "eos", EOS)]
    assert await collect(engine, request({"output": "", "end": "eof"})) == []


async def test_tokens_per_step_groups_ids(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    expected = TOK.encode(TEXT) + [EOS]
    assert len(expected) % 3 != 0  # so the last group is short
    outs = await collect(engine, request({"output": TEXT, "tokens_per_step": 3}))
    assert [len(o.token_ids) for o in outs] == [3] * (len(expected) // 3) + [len(expected) % 3]
    assert ids_of(outs) == expected
    assert outs[-1].finish == "eos"


async def test_n2_list_of_outputs(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    texts = ["First answer.", "A second, longer answer here."]
    outs = await collect(engine, request({"output": texts, "end": "length"}, n=2))
    for index, text in enumerate(texts):
        assert ids_of(outs, index) == TOK.encode(text)
        finishes = [o.finish for o in outs if o.index == index and o.finish]
        assert finishes == ["length"]
    # One string is played on every choice.
    outs = await collect(engine, request({"output": TEXT}, n=3))
    assert [ids_of(outs, i) for i in range(3)] == [TOK.encode(TEXT) + [EOS]] * 3


@pytest.mark.parametrize(
    ("mock", "n", "field"),
    [
        ("just text", 1, "mock must be an object"),
        ({"output": "x", "tokens": 3}, 1, "tokens"),
        ({"output": 42}, 1, "mock.output"),
        ({"output": ["a", 1]}, 2, "mock.output"),
        ({"output": ["a", "b", "c"]}, 2, "mock.output"),
        ({"output": ["a"]}, 2, "mock.output"),
        ({"output": "x", "end": "done"}, 1, "mock.end"),
        ({"output": "x", "tokens_per_step": 0}, 1, "mock.tokens_per_step"),
        ({"output": "x", "tokens_per_step": "2"}, 1, "mock.tokens_per_step"),
        ({"output": "x", "tokens_per_step": True}, 1, "mock.tokens_per_step"),
    ],
)
async def test_script_validation(make_engine: MakeEngine, mock: Any, n: int, field: str) -> None:
    engine = await make_engine()
    req = request(mock, n=n)
    gen = pulled(engine.generate(req))
    with pytest.raises(EngineError, match=field) as e:
        await gen.__anext__()  # raised on first iteration, before any output
    assert (e.value.kind, e.value.param) == ("refused", "mock")
    state = engine.state()
    assert (state.active_requests, state.waiting, state.running, state.steps) == (
        0,
        0,
        0,
        0,
    )


async def test_request_validation(make_engine: MakeEngine) -> None:
    engine = await make_engine(num_kv_blocks=4, block_size=4)
    with pytest.raises(EngineError, match="empty") as e:
        await pulled(engine.generate(request(prompt=""))).__anext__()
    assert e.value.param == "prompt"
    with pytest.raises(EngineError, match="token_ids") as e:
        await pulled(
            engine.generate(request(prompt=TEXT * 3))
        ).__anext__()  # over the 16-token cache
    assert e.value.param == "prompt"
    with pytest.raises(EngineError, match="max_tokens") as e:
        await pulled(
            engine.generate(request(prompt="Hi", stop=StopParams(max_tokens=0)))
        ).__anext__()
    assert e.value.param == "max_tokens"
    with pytest.raises(EngineError, match="n must be") as e:
        await pulled(engine.generate(request({"output": "ok"}, n=0))).__anext__()
    assert e.value.param == "n"
    scripted = request({"output": "ok"}, prompt="Hi", stop=StopParams(max_tokens=0))
    assert ids_of(await collect(engine, scripted)) == TOK.encode("ok") + [EOS]  # scripts ignore it


async def test_duplicate_request_id_rejected(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    first = pulled(engine.generate(request({"output": TEXT}, rid="same")))
    await first.__anext__()
    with pytest.raises(EngineError, match="already running") as e:
        await pulled(engine.generate(request({"output": TEXT}, rid="same"))).__anext__()
    assert e.value.param is None
    assert engine.state().active_requests == 1
    rest = [out async for out in first]  # the first request is undisturbed
    assert rest[-1].finish == "eos"


async def test_no_eos_id_refuses_eos_ends_only() -> None:
    no_eos = dataclasses.replace(CARD, eos_token_ids=[])
    engine = MockerEngine(no_eos, TOK, MockerConfig(speedup_ratio=0, eos_probability=1.0))
    await engine.start()
    try:
        for end in ("eos", "eos_hidden"):
            req = request({"output": TEXT, "end": end})
            with pytest.raises(EngineError, match="no EOS token id") as e:
                await pulled(engine.generate(req)).__anext__()
            assert (e.value.kind, e.value.param) == ("refused", "mock")
        # The request's own EOS ids stand in for the card's.
        req = request({"output": TEXT}, stop=StopParams(eos_token_ids=[EOS]))
        assert ids_of(await collect(engine, req)) == TOK.encode(TEXT) + [EOS]
        # Other ends, and seeded output (which then never samples an EOS), still run.
        outs = await collect(engine, request({"output": TEXT, "end": "stop"}))
        assert ids_of(outs) == TOK.encode(TEXT) and outs[-1].finish == "stop"
        outs = await collect(engine, request(stop=StopParams(max_tokens=8)))
        assert len(ids_of(outs)) == 8 and EOS not in ids_of(outs)
        assert outs[-1].finish == "length"
        assert engine.state().active_requests == 0
    finally:
        await engine.stop()


async def test_not_started_is_an_error() -> None:
    engine = MockerEngine(CARD, TOK, MockerConfig())
    with pytest.raises(EngineError, match="not started"):
        await pulled(engine.generate(request({"output": "x"}))).__anext__()


async def test_guided_constraints_are_accepted(make_engine: MakeEngine) -> None:
    engine = await make_engine(structural_tags=False)
    guided = {"type": "structural_tag", "structures": [], "triggers": ["<tool_call>"]}
    outs = await collect(engine, request({"output": TEXT}, sampling=SamplingParams(guided=guided)))
    assert ids_of(outs) == TOK.encode(TEXT) + [EOS]
    schema = {"type": "json_schema", "json_schema": {"type": "object"}}
    outs = await collect(engine, request(sampling=SamplingParams(guided=schema, seed=1)))
    assert outs[-1].finish in ("eos", "length")


async def test_script_longer_than_the_engine_holds_ends_at_length(
    make_engine: MakeEngine,
) -> None:
    engine = await make_engine(num_kv_blocks=8, block_size=4)  # 32 tokens per sequence
    req = request({"output": TEXT * 4})
    outs = await collect(engine, req)
    assert outs[-1].finish == "length"
    assert len(req.token_ids) + len(ids_of(outs)) == 32
    assert ids_of(outs) == TOK.encode(TEXT * 4)[: 32 - len(req.token_ids)]


# -- seeded output ---------------------------------------------------------------


def ordinary(tok: Tokenizer) -> set[int]:
    return set(range(tok.vocab_size)) - set(tok.raw.get_added_tokens_decoder())


async def test_seeded_output_is_reproducible(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    stop = StopParams(max_tokens=40)

    async def run(seed: int | None, rid: str | None = None, n: int = 1) -> list[EngineOutput]:
        return await collect(
            engine, request(rid=rid, n=n, stop=stop, sampling=SamplingParams(seed=seed))
        )

    a, b = await run(7), await run(7)  # different request ids, same seed
    assert [(o.token_ids, o.finish) for o in a] == [(o.token_ids, o.finish) for o in b]
    assert ids_of(await run(8)) != ids_of(a)
    two = await run(7, n=2)
    assert ids_of(two, 0) == ids_of(a)
    assert ids_of(two, 1) != ids_of(a)  # each choice has its own generator
    # Without a seed the engine's seed and the request id decide.
    assert ids_of(await run(None, rid="x")) == ids_of(await run(None, rid="x"))
    assert ids_of(await run(None, rid="x")) != ids_of(await run(None, rid="y"))
    other = await make_engine(seed=99)
    again = await collect(other, request(stop=stop, sampling=SamplingParams(seed=7)))
    assert ids_of(again) == ids_of(a)  # a request seed wins over the engine's


async def test_seeded_tokens_are_ordinary_and_end_at_eos_or_length(
    make_engine: MakeEngine,
) -> None:
    engine = await make_engine(eos_probability=0.2)
    seen_eos = seen_length = False
    for seed in range(20):
        outs = await collect(
            engine, request(stop=StopParams(max_tokens=10), sampling=SamplingParams(seed=seed))
        )
        ids = ids_of(outs)
        assert [o.finish for o in outs[:-1]] == [None] * (len(outs) - 1)
        last = outs[-1]
        if last.finish == "eos":
            seen_eos = True
            assert ids[-1] == EOS == last.matched and len(ids) <= 10
            assert set(ids[:-1]) <= ordinary(TOK)
        else:
            seen_length = True
            assert last.finish == "length" and len(ids) == 10
            assert set(ids) <= ordinary(TOK)
    assert seen_eos and seen_length


async def test_ignore_eos_and_min_tokens(make_engine: MakeEngine) -> None:
    engine = await make_engine(eos_probability=1.0)
    outs = await collect(engine, request(stop=StopParams(max_tokens=10)))
    assert [(o.token_ids, o.finish, o.matched) for o in outs] == [([EOS], "eos", EOS)]
    outs = await collect(engine, request(stop=StopParams(max_tokens=10, min_tokens=4)))
    ids = ids_of(outs)
    assert len(ids) == 5 and EOS not in ids[:4] and ids[4] == EOS
    assert (outs[-1].finish, outs[-1].matched) == ("eos", EOS)
    outs = await collect(engine, request(stop=StopParams(max_tokens=12, ignore_eos=True)))
    assert len(ids_of(outs)) == 12 and EOS not in ids_of(outs)
    assert outs[-1].finish == "length"


async def test_user_stop_token_ids(make_engine: MakeEngine) -> None:
    engine = await make_engine(eos_probability=0.0)
    every = sorted(ordinary(TOK))
    outs = await collect(engine, request(stop=StopParams(max_tokens=10, stop_token_ids=every)))
    assert len(outs) == 1 and outs[0].finish == "stop" and outs[0].matched == outs[0].token_ids[0]
    outs = await collect(
        engine, request(stop=StopParams(max_tokens=10, min_tokens=3, stop_token_ids=every))
    )
    assert len(ids_of(outs)) == 4 and outs[-1].finish == "stop"


@pytest.mark.parametrize("top", [0, 1, 5])
async def test_logprobs_are_well_formed(make_engine: MakeEngine, top: int) -> None:
    engine = await make_engine()
    plain = await collect(
        engine, request(stop=StopParams(max_tokens=20), sampling=SamplingParams(seed=3))
    )
    output = OutputParams(logprobs=True, top_logprobs=top)
    for req in (
        request(stop=StopParams(max_tokens=20), sampling=SamplingParams(seed=3), output=output),
        request({"output": TEXT, "tokens_per_step": 2}, output=output),
    ):
        outs = await collect(engine, req)
        for out in outs:
            assert out.logprobs is not None and len(out.logprobs) == len(out.token_ids)
            for token_id, lp in zip(out.token_ids, out.logprobs, strict=True):
                assert lp.token_id == token_id and lp.logprob <= 0.0
                assert len(lp.top) == top
                values = [v for _, v in lp.top]
                assert values == sorted(values, reverse=True)
                assert all(v <= 0.0 for v in values)
                assert len({i for i, _ in lp.top}) == top
                assert sum(math.exp(v) for v in values) <= 1.0 + 1e-9
                top_ids = dict(lp.top)
                if token_id in top_ids:
                    assert top_ids[token_id] == lp.logprob
                elif top:
                    assert lp.logprob <= min(values)
    assert ids_of(outs) == TOK.encode(TEXT) + [EOS]
    assert all(o.logprobs is None for o in plain)
    with_lp = await collect(
        engine,
        request(stop=StopParams(max_tokens=20), sampling=SamplingParams(seed=3), output=output),
    )
    assert ids_of(with_lp) == ids_of(plain)  # asking for logprobs never changes the tokens


# -- a consumer that falls behind ---------------------------------------------------


async def test_a_request_its_outbox_window_held_goes_on_once_delivered(
    make_engine: MakeEngine,
) -> None:
    """Steps of 64 tokens fill the outbox's window inside one slice: the
    request is held, the engine idles, and its last delivery (which empties
    the outbox) resumes it; the engine must not sleep through that resume."""
    engine = await make_engine(step_slice_ms=1000.0)  # every step in one slice
    script = {"output": TEXT * 40, "end": "eos", "tokens_per_step": 64}
    sink: Recorder[EngineOutput] = Recorder()  # a sink that always keeps up
    engine.generate(request(script)).subscribe(sink)
    assert await asyncio.wait_for(sink.ended, 10) is None
    assert ids_of(sink.items) == TOK.encode(TEXT * 40) + [EOS]


async def test_a_slow_consumer_gets_each_choices_tokens_merged(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    texts = [TEXT * 3, "A second, shorter answer."]
    output = OutputParams(logprobs=True)
    gen = pulled(engine.generate(request({"output": texts}, n=2, output=output)))
    outs = [await gen.__anext__()]
    while engine.state().running:  # every token is computed while nobody reads
        await asyncio.sleep(0)
    outs += [out async for out in gen]
    for index, text in enumerate(texts):
        mine = [o for o in outs if o.index == index]
        assert ids_of(outs, index) == TOK.encode(text) + [EOS]
        # What was queued when the consumer first looked, then all the rest at once.
        assert len(mine) <= 2 < len(TOK.encode(text))
        assert [o.finish for o in mine][-1] == "eos" and mine[-1].matched == EOS
        assert all(o.finish is None for o in mine[:-1])
        assert all(len(o.logprobs or []) == len(o.token_ids) for o in mine)
        assert mine[0].cached_tokens == 0
        assert all(o.cached_tokens is None for o in mine[1:])


async def test_merging_keeps_a_closed_choices_output_before_its_end(
    make_engine: MakeEngine,
) -> None:
    engine = await make_engine()
    texts = ["ends with no finish at all", TEXT]
    gen = pulled(engine.generate(request({"output": texts, "end": "eof"}, n=2)))
    outs = [await gen.__anext__()]
    while engine.state().running:
        await asyncio.sleep(0)
    outs += [out async for out in gen]
    assert [ids_of(outs, i) for i in range(2)] == [TOK.encode(t) for t in texts]
    assert all(o.finish is None for o in outs)
    assert len(outs) <= 4


# -- abort -----------------------------------------------------------------------


async def test_closing_the_generator_aborts_and_frees(make_engine: MakeEngine) -> None:
    engine = await make_engine(num_kv_blocks=64, block_size=4)
    gen = pulled(engine.generate(request({"output": TEXT * 8}, n=2)))
    for _ in range(4):
        await gen.__anext__()
    state = engine.state()
    assert state.running == 2 and state.kv_blocks_free < state.kv_blocks_total
    await gen.aclose()
    state = engine.state()
    assert (state.running, state.waiting, state.active_requests) == (0, 0, 0)
    assert state.kv_blocks_free == state.kv_blocks_total
    # A request served afterwards, a step at a time: the loop ran, and made
    # that request's tokens alone (still working for the closed one, it would
    # have made that one's tokens in the same steps)
    made = engine.state().tokens_generated
    probe = await collect(engine, request({"output": TEXT}))
    assert ids_of(probe) == TOK.encode(TEXT) + [EOS]
    assert engine.state().tokens_generated == made + len(ids_of(probe))


async def test_a_stream_dropped_unclosed_frees_its_request_in_a_turn_of_its_own(
    make_engine: MakeEngine,
) -> None:
    """As an async generator collected unclosed: aborted, but from the loop,
    never inside whatever code the collector happened to run in."""
    engine = await make_engine()
    gen = pulled(engine.generate(request({"output": TEXT * 8})))
    await gen.__anext__()
    assert engine.state().running == 1
    del gen
    gc.collect()
    assert engine.state().active_requests == 1  # not inside the collection
    await wait_for_async(
        "the request gone", lambda: engine.state().active_requests == 0, 10, pause=0
    )
    assert engine.state().running == 0


async def test_cancelling_the_consumer_aborts(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    got: list[EngineOutput] = []

    async def consume() -> None:
        async for out in pulled(engine.generate(request({"output": TEXT * 20}))):
            got.append(out)

    task = asyncio.create_task(consume())
    while len(got) < 3:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    state = engine.state()
    assert (state.running, state.waiting, state.active_requests) == (0, 0, 0)
    assert state.kv_blocks_free == state.kv_blocks_total


async def test_abort_one_choice(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    req = request({"output": [TEXT * 10, TEXT]}, n=2)
    after_abort: list[EngineOutput] = []
    aborted = False
    async for out in pulled(engine.generate(req)):
        if aborted:
            after_abort.append(out)
        elif out.index == 0:
            engine.abort(req.request_id, 0)
            aborted = True
            assert engine.state().running == 1
    assert aborted
    assert all(o.index == 1 for o in after_abort)
    assert after_abort[-1].finish == "eos"
    assert engine.state().active_requests == 0


async def test_abort_whole_request_ends_the_stream(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    req = request({"output": TEXT * 10}, n=2)

    def third_aborts(sink: Recorder[EngineOutput], out: EngineOutput) -> None:
        if len(sink.items) == 3:
            engine.abort(req.request_id)

    sink: Recorder[EngineOutput] = Recorder(third_aborts)
    engine.generate(req).subscribe(sink)
    assert await sink.ended is None  # the stream ended, with nothing after the abort
    assert len(sink.items) == 3
    assert engine.state().kv_blocks_free == engine.state().kv_blocks_total


async def test_stop_fails_requests_in_flight(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    gen = pulled(engine.generate(request({"output": TEXT * 10})))
    await gen.__anext__()
    await engine.stop()
    rest = [out async for out in gen]
    assert rest[-1].finish == "error" and rest[-1].error == "engine stopped"
