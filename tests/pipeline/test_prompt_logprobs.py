"""The prompt's logprobs through a request's pipeline, with the mocker:
preprocess asks each choice's engine request for them (the most that echo
and `prompt_logprobs` need), each choice's first event carries its prompt's,
`max_tokens: 0` ends a choice before its first token, and an engine that
cannot give them is a 400 naming the field before any engine work."""

from __future__ import annotations

import pytest

from rotor.engines.mocker.sampler import prompt_logprobs, readable_vocab
from rotor.model.card import echo_card
from rotor.pipeline.errors import RequestError
from rotor.pipeline.events import ChoiceEvent, Usage
from rotor.pipeline.generate import run_all
from rotor.pipeline.preprocess import prepare_chat, prepare_completion
from rotor.pipeline.served import ServedModel
from rotor.protocol.flow import Pulled
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest

from support.mocker import TOK, MakeEngine

VOCAB = readable_vocab(TOK)


async def run(engine: object, prepared: list) -> list[ChoiceEvent]:
    usage = Usage(0, [c.decoder for p in prepared for c in p.choices])
    return [e async for e in Pulled(run_all(engine, prepared, usage))]  # type: ignore[arg-type]


async def test_each_choice_of_each_prompt_gets_its_prompt_s_on_its_first_event(
    make_engine: MakeEngine,
) -> None:
    engine = await make_engine()
    model = ServedModel.build(engine.card, TOK)
    req = CompletionRequest(
        prompt=["One prompt here", "and another"], n=2, echo=True, logprobs=1, prompt_logprobs=3
    )
    prepared = prepare_completion(model, req, "r")
    assert {r.output.prompt_logprobs for p in prepared for r in p.requests} == {3}
    events = await run(engine, prepared)
    for index in range(4):
        mine = [e for e in events if e.index == index]
        prompt = prepared[index // 2].token_ids
        assert mine[0].prompt_logprobs == prompt_logprobs(VOCAB, prompt, 3)
        assert all(e.prompt_logprobs is None for e in mine[1:])


async def test_max_tokens_zero_ends_every_choice_before_its_first_token(
    make_engine: MakeEngine,
) -> None:
    engine = await make_engine()
    model = ServedModel.build(engine.card, TOK)
    req = CompletionRequest(prompt="Score me", n=2, echo=True, logprobs=0, max_tokens=0)
    prepared = prepare_completion(model, req, "r")
    assert [r.stop.max_tokens for r in prepared[0].requests] == [1, 1]  # the engine makes one
    events = await run(engine, prepared)
    assert sorted(e.index for e in events) == [0, 1]  # one event each: prompt, finish
    for e in events:
        assert e.pieces == [] and e.logprobs == []
        assert e.finished is not None and e.finished.finish_reason == "length"
        assert e.prompt_logprobs == prompt_logprobs(VOCAB, prepared[0].token_ids, 0)
    assert sum(c.decoder.tokens for c in prepared[0].choices) == 0  # no completion tokens


async def test_chat_asks_only_when_not_streamed(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    model = ServedModel.build(engine.card, TOK)
    messages = [{"role": "user", "content": "hi"}]
    asked = prepare_chat(model, ChatCompletionRequest(messages=messages, prompt_logprobs=2), "a")
    events = await run(engine, [asked])
    assert events[0].prompt_logprobs == prompt_logprobs(VOCAB, asked.token_ids, 2)
    streamed = ChatCompletionRequest(messages=messages, prompt_logprobs=0, stream=True)
    assert prepare_chat(model, streamed, "b").requests[0].output.prompt_logprobs is None
    plain = prepare_chat(model, ChatCompletionRequest(messages=messages), "c")
    assert plain.requests[0].output.prompt_logprobs is None
    assert all(e.prompt_logprobs is None for e in await run(engine, [plain]))


@pytest.mark.parametrize(
    ("fields", "param"),
    [({"prompt_logprobs": 1}, "prompt_logprobs"), ({"echo": True, "logprobs": 1}, "logprobs")],
)
def test_an_engine_that_cannot_is_a_400_naming_the_field(fields: dict, param: str) -> None:
    model = ServedModel.build(echo_card(), None)
    with pytest.raises(RequestError) as e:
        prepare_completion(model, CompletionRequest(prompt="x", **fields), "r")
    assert e.value.param == param and param in str(e.value)


def test_an_engine_with_logprobs_but_not_the_prompt_s_names_echo() -> None:
    card = echo_card()
    card.capabilities.logprobs = True
    model = ServedModel.build(card, None)
    with pytest.raises(RequestError) as e:
        prepare_completion(model, CompletionRequest(prompt="x", echo=True, logprobs=1), "r")
    assert e.value.param == "echo" and "echo with logprobs" in str(e.value)
