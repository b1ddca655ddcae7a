"""The echo engine through the Engine interface: text and token output, n,
max_tokens, abort, duplicate ids, stop."""

from __future__ import annotations

import itertools

import pytest

from rotor.engines.echo import EchoEngine
from rotor.model.card import ECHO_EOS_ID, echo_card
from rotor.protocol.engine import (
    EngineError,
    EngineOutput,
    EngineRequest,
    EngineState,
    StopParams,
    pulled,
)

from support.mocker import CARD, EOS, TOK, collect, ids_of

TEXT = "Hello, echo!"
_ids = itertools.count()


def text_request(
    text: str | None = TEXT, n: int = 1, max_tokens: int = 1000, rid: str | None = None
) -> EngineRequest:
    return EngineRequest(
        request_id=rid or f"echo-{next(_ids)}",
        model="echo",
        token_ids=[],
        n=n,
        stop=StopParams(max_tokens=max_tokens),
        annotations={"echo_text": text} if text is not None else {},
    )


def text_of(outs: list[EngineOutput], index: int = 0) -> str:
    return "".join(o.text or "" for o in outs if o.index == index)


def finishes(outs: list[EngineOutput], index: int = 0) -> list[tuple[str | None, object]]:
    return [(o.finish, o.matched) for o in outs if o.index == index and o.finish]


@pytest.fixture
def engine() -> EchoEngine:
    return EchoEngine(echo_card(), delay_ms=0)


async def test_text_out_n_choices_each_get_the_text(engine: EchoEngine) -> None:
    outs = await collect(engine, text_request(n=3))
    for index in range(3):
        mine = [o for o in outs if o.index == index]
        assert [o.text for o in mine] == list(TEXT)  # one character per output
        assert finishes(outs, index) == [("eos", ECHO_EOS_ID)]
        assert mine[-1].finish == "eos"
    assert engine.state() == EngineState(active_requests=0, tokens_generated=3 * len(TEXT))


async def test_empty_text_ends_at_eos_at_once(engine: EchoEngine) -> None:
    outs = await collect(engine, text_request("", n=2))
    assert [(o.index, o.text, o.finish, o.matched) for o in outs] == [
        (0, None, "eos", ECHO_EOS_ID),
        (1, None, "eos", ECHO_EOS_ID),
    ]


async def test_token_out_echoes_the_prompt_without_its_eos_ids() -> None:
    engine = EchoEngine(CARD, TOK, delay_ms=0)
    prompt = TOK.encode("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")
    assert EOS in prompt
    req = EngineRequest("tok", CARD.name, prompt, n=2, stop=StopParams(max_tokens=1000))
    outs = await collect(engine, req)
    expected = [t for t in prompt if t != EOS] + [EOS]
    for index in range(2):
        assert ids_of(outs, index) == expected
        assert all(len(o.token_ids) == 1 and o.text is None for o in outs if o.index == index)
        assert finishes(outs, index) == [("eos", EOS)]


async def test_max_tokens_ends_every_choice_at_length(engine: EchoEngine) -> None:
    outs = await collect(engine, text_request(n=2, max_tokens=5))
    for index in range(2):
        assert text_of(outs, index) == TEXT[:5]
        assert finishes(outs, index) == [("length", None)]
        assert outs[-1].finish == "length"
    # Exactly the text's length is not cut: it ends at EOS.
    outs = await collect(engine, text_request(max_tokens=len(TEXT)))
    assert text_of(outs) == TEXT and finishes(outs) == [("eos", ECHO_EOS_ID)]


async def test_abort_one_choice(engine: EchoEngine) -> None:
    req = text_request(n=2)
    outs: list[EngineOutput] = []
    async for out in pulled(engine.generate(req)):
        outs.append(out)
        if len(outs) == 4:  # two characters of each choice
            engine.abort(req.request_id, 0)
    assert text_of(outs, 0) == TEXT[:2] and finishes(outs, 0) == []
    assert text_of(outs, 1) == TEXT and finishes(outs, 1) == [("eos", ECHO_EOS_ID)]
    assert engine.state().active_requests == 0


async def test_abort_the_whole_request_ends_the_stream(engine: EchoEngine) -> None:
    req = text_request(n=3)
    outs: list[EngineOutput] = []
    async for out in pulled(engine.generate(req)):
        outs.append(out)
        if len(outs) == 4:
            engine.abort(req.request_id)
    # The abort came while choice 0 of the second step was out: nothing follows it.
    assert len(outs) == 4 and all(o.finish is None for o in outs)
    assert engine.state().active_requests == 0


async def test_abort_of_a_choice_that_does_not_exist_changes_nothing(
    engine: EchoEngine,
) -> None:
    req = text_request(n=2)
    outs: list[EngineOutput] = []
    async for out in pulled(engine.generate(req)):
        outs.append(out)
        if len(outs) == 1:
            engine.abort(req.request_id, 5)
            engine.abort(req.request_id, -1)
            engine.abort(req.request_id, 0)
    assert text_of(outs, 1) == TEXT and finishes(outs, 1) == [("eos", ECHO_EOS_ID)]
    engine.abort("no-such-request")  # ignored


async def test_duplicate_request_id_rejected(engine: EchoEngine) -> None:
    first = pulled(engine.generate(text_request(rid="same")))
    got = [await first.__anext__()]
    with pytest.raises(EngineError, match="already running") as e:
        await pulled(engine.generate(text_request("other text", rid="same"))).__anext__()
    assert e.value.param is None
    assert engine.state().active_requests == 1
    engine.abort("same", 0)  # the first request is still the one registered
    got += [out async for out in first]
    assert text_of(got) == TEXT[:1]
    assert engine.state().active_requests == 0
    # Once the first has ended, the id may be used again.
    assert text_of(await collect(engine, text_request(rid="same"))) == TEXT


async def test_without_a_tokenizer_the_text_is_needed(engine: EchoEngine) -> None:
    assert text_of(await collect(engine, text_request())) == TEXT
    req = text_request(None)
    with pytest.raises(EngineError, match="needs the text to echo") as e:
        await pulled(engine.generate(req)).__anext__()
    assert (e.value.kind, e.value.param) == ("refused", "messages")
    assert engine.state().active_requests == 0
    # With a tokenizer the prompt's tokens are echoed; no text is needed.
    with_tokenizer = EchoEngine(CARD, TOK, delay_ms=0)
    assert await collect(with_tokenizer, text_request(None))
