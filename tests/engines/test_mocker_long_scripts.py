"""Long `mock` scripts in the mocker: tokenized off the event loop (the loop
serves other requests meanwhile), aborts and stops that come while they are,
and only the tokens a sequence can reach are kept."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.engines.mocker.admission import OFF_LOOP_SCRIPT_CHARS
from rotor.protocol.engine import EngineError, EngineOutput, pulled

from support.gated import GatedTokenizer
from support.mocker import CARD, EOS, TOK, MakeEngine, collect, ids_of, request

LONG = "lorem ipsum dolor sit amet " * (OFF_LOOP_SCRIPT_CHARS // 25)  # just over the bound
assert len(LONG) > OFF_LOOP_SCRIPT_CHARS


def script(output: str | list[str], **more: Any) -> dict[str, Any]:
    return {"output": output, "tokens_per_step": 64, **more}


@pytest.fixture
async def gated() -> Any:
    """(engine, tokenizer): a started mocker whose tokenizer gates long texts."""
    tok = GatedTokenizer(TOK)
    engine = MockerEngine(CARD, tok, MockerConfig(speedup_ratio=0, step_slice_ms=0))
    await engine.start()
    try:
        yield engine, tok
    finally:
        tok.gate.set()  # never leave a script thread waiting
        await engine.stop()


async def test_a_long_script_is_tokenized_off_the_loop_which_serves_others_meanwhile(
    gated: tuple[MockerEngine, GatedTokenizer],
) -> None:
    engine, tok = gated
    big = asyncio.create_task(collect(engine, request(script(LONG))))
    await tok.reached(big)
    assert engine.state().active_requests == 1  # a request being tokenized is one
    # The long script's tokenization has not finished, yet the loop and the
    # engine's step loop serve a whole other request meanwhile.
    short = await collect(engine, request({"output": "Hi there"}))
    assert ids_of(short) == [*TOK.encode("Hi there"), EOS]
    assert not big.done()
    tok.gate.set()
    outs = await big
    assert ids_of(outs) == [*TOK.encode(LONG), EOS]
    assert outs[-1].finish == "eos"
    assert tok.long_on and all(name.startswith("rotor-mocker-script") for name in tok.long_on)


async def test_one_long_text_is_tokenized_once_for_all_choices(
    gated: tuple[MockerEngine, GatedTokenizer],
) -> None:
    engine, tok = gated
    tok.gate.set()
    outs = await collect(engine, request(script(LONG), n=3))
    for index in range(3):
        assert ids_of(outs, index) == [*TOK.encode(LONG), EOS]
    assert len(tok.long_on) == 1


async def test_a_list_of_long_texts_gives_each_choice_its_own(
    gated: tuple[MockerEngine, GatedTokenizer],
) -> None:
    engine, tok = gated
    tok.gate.set()
    texts = [LONG, "short one", LONG.upper()]
    outs = await collect(engine, request(script(texts, end="stop"), n=3))
    for index, text in enumerate(texts):
        assert ids_of(outs, index) == TOK.encode(text)


async def test_an_abort_while_the_script_is_tokenized_ends_the_request(
    gated: tuple[MockerEngine, GatedTokenizer],
) -> None:
    engine, tok = gated
    req = request(script(LONG), n=2)
    big = asyncio.create_task(collect(engine, req))
    await tok.reached(big)
    engine.abort(req.request_id)
    tok.gate.set()
    assert await big == []  # no output at all: it was aborted before it ran
    state = engine.state()
    assert (state.active_requests, state.waiting, state.running) == (0, 0, 0)
    assert state.kv_blocks_free == state.kv_blocks_total


async def test_aborting_one_choice_while_the_script_is_tokenized(
    gated: tuple[MockerEngine, GatedTokenizer],
) -> None:
    engine, tok = gated
    req = request(script(LONG), n=2)
    big = asyncio.create_task(collect(engine, req))
    await tok.reached(big)
    engine.abort(req.request_id, 0)
    tok.gate.set()
    outs = await big
    assert ids_of(outs, 0) == []
    assert ids_of(outs, 1) == [*TOK.encode(LONG), EOS]


async def test_the_same_id_is_refused_while_its_script_is_tokenized(
    gated: tuple[MockerEngine, GatedTokenizer],
) -> None:
    engine, tok = gated
    req = request(script(LONG))
    big = asyncio.create_task(collect(engine, req))
    await tok.reached(big)
    with pytest.raises(EngineError, match="already running"):
        await collect(engine, req)
    tok.gate.set()
    assert ids_of(await big) == [*TOK.encode(LONG), EOS]


async def test_stopping_while_a_script_is_tokenized_refuses_it(
    gated: tuple[MockerEngine, GatedTokenizer],
) -> None:
    engine, tok = gated
    big = asyncio.create_task(collect(engine, request(script(LONG))))
    await tok.reached(big)
    await engine.stop()
    tok.gate.set()
    with pytest.raises(EngineError) as e:
        await big
    assert e.value.kind == "unavailable"
    assert engine.state().active_requests == 0


async def test_leaving_while_the_script_is_tokenized_admits_nothing(
    gated: tuple[MockerEngine, GatedTokenizer],
) -> None:
    engine, tok = gated
    req = request(script(LONG))
    big = asyncio.create_task(collect(engine, req))
    await tok.reached(big)
    big.cancel()
    with pytest.raises(asyncio.CancelledError):
        await big
    tok.gate.set()
    # The id is free again, and the engine holds nothing of the request.
    assert ids_of(await collect(engine, req)) == [*TOK.encode(LONG), EOS]
    state = engine.state()
    assert (state.active_requests, state.waiting, state.running) == (0, 0, 0)


# -- only what a sequence can reach is kept -----------------------------------------------


@pytest.mark.parametrize("end", ["eos", "eos_hidden", "stop", "eof", "error"])
async def test_a_script_longer_than_a_sequence_holds_plays_to_length(
    make_engine: MakeEngine, end: str
) -> None:
    engine = await make_engine(num_kv_blocks=8, block_size=16)  # 128 tokens a sequence
    req = request({"output": LONG, "end": end, "tokens_per_step": 7})
    room = engine.max_seq_len - len(req.token_ids)
    outs: list[EngineOutput] = []
    kept = None
    async for out in pulled(engine.generate(req)):
        if kept is None:
            (seq,) = engine.requests[req.request_id].seqs
            kept = len(seq.source.token_ids)
        outs.append(out)
    assert ids_of(outs) == TOK.encode(LONG)[:room]
    assert outs[-1].finish == "length"
    assert kept == room + 1 + (end == "eos")  # not the thousands of the script (and its EOS)


async def test_a_resumed_script_keeps_what_it_can_still_reach(make_engine: MakeEngine) -> None:
    engine = await make_engine(num_kv_blocks=8, block_size=16)
    whole = TOK.encode(LONG)
    first = request(script(LONG))
    done = 40  # tokens the first engine produced before it died
    resumed = dataclasses.replace(
        first,
        token_ids=[*first.token_ids, *whole[:done]],
        annotations={"mock": script(LONG), "resume_from": done},
    )
    outs = await collect(engine, resumed)
    room = engine.max_seq_len - len(resumed.token_ids)
    assert ids_of(outs) == whole[done : done + room]
    assert outs[-1].finish == "length"
