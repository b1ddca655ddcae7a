"""`return_token_ids` in one choice's pipeline: the ids its events carry are
the engine's own, however the engine cut them into outputs; up to and
including the token that ended the choice (a stop string's last token, the
EOS), none past it; untouched by tool-call parsing; none at all when not asked."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.model.builtin import builtin_test_model
from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.collected import Collected
from rotor.pipeline.decode import ChoiceDecoder
from rotor.pipeline.events import ChoiceEvent
from rotor.pipeline.parse.base import ToolCall, Tools
from rotor.pipeline.parse.message import MessageParser
from rotor.pipeline.parse.tools import tool_parser
from rotor.protocol.engine import EngineOutput, StopParams

from support.scripts import hermes

CARD, TOK = builtin_test_model()
EOS = CARD.eos_token_ids[0]
TOOLS = Tools({"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}})
CALL_TEXT = "Let me check. " + hermes("get_weather", {"city": "Paris"}, newlines=True)
STORY = "Once upon a time, a fox said STOP and then it went on talking."
splits = st.lists(st.integers(1, 6), min_size=1, max_size=40)


def ids(text: str) -> list[int]:
    return TOK.encode(text, add_special_tokens=False)


def pipeline(
    keep_ids: bool = True, stop: Sequence[str] = (), max_tokens: int = 1000
) -> ChoicePipeline:
    """One choice as preprocess builds it for the ChatML model with hermes tools."""
    params = StopParams(max_tokens=max_tokens, eos_token_ids=list(CARD.eos_token_ids))
    decoder = ChoiceDecoder(
        params,
        list(stop) or None,
        decoder=TOK.decoder(True),
        token_text=lambda t: TOK.decode(t, skip_special_tokens=False),
    )
    parser = MessageParser(tools=tool_parser("hermes")(TOOLS))
    return ChoicePipeline(0, decoder, parser, keep_ids=keep_ids)


def cut(all_ids: list[int], sizes: list[int]) -> list[EngineOutput]:
    """`all_ids` as the engine might send them: `sizes` ids per output (the last repeats)."""
    outs, i, k = [], 0, 0
    while i < len(all_ids):
        size = sizes[min(k, len(sizes) - 1)]
        outs.append(EngineOutput(token_ids=all_ids[i : i + size]))
        i, k = i + size, k + 1
    return outs


def events(pipe: ChoicePipeline, outs: list[EngineOutput]) -> list[ChoiceEvent]:
    """Each output's event, as the choice's run makes them (and a close at EOF)."""
    out = [pipe.event(0, pipe.feed(o)) for o in outs if pipe.finished is None]
    if pipe.finished is None:
        out.append(pipe.event(0, pipe.close()))
    return out


def collected(evs: list[ChoiceEvent]) -> Collected:
    c = Collected()
    for e in evs:
        c.add(e)
    return c


def streamed_ids(evs: list[ChoiceEvent]) -> list[int]:
    return [t for e in evs for t in (e.token_ids or [])]


@settings(max_examples=60, deadline=None)
@given(sizes=splits)
def test_any_split_hands_out_every_id_once_parsing_changes_none(sizes: list[int]) -> None:
    engine_ids = [*ids(CALL_TEXT), EOS]
    evs = events(pipeline(), cut(engine_ids, sizes))
    assert streamed_ids(evs) == engine_ids
    c = collected(evs)
    assert c.token_ids == engine_ids
    # the call was parsed out of the text: the ids still hold its markup
    (call,) = c.tool_calls()
    assert isinstance(call, ToolCall) and call.name == "get_weather"
    assert c.finish_reason == "tool_calls"


@settings(max_examples=60, deadline=None)
@given(sizes=splits)
def test_ids_go_with_the_text_they_released_or_the_finish(sizes: list[int]) -> None:
    """An event carries ids only when it carries pieces or the finish: ids
    whose text is held back wait for it, as their logprobs do."""
    evs = events(pipeline(), cut([*ids(CALL_TEXT), EOS], sizes))
    for e in evs:
        assert e.token_ids is not None
        if e.token_ids:
            assert e.pieces or e.finished is not None
    assert evs[-1].finished is not None


@settings(max_examples=60, deadline=None)
@given(sizes=splits)
def test_a_stop_string_keeps_the_ids_through_the_one_that_completed_it(sizes: list[int]) -> None:
    """vLLM's rule: the token whose text completed the stop string is
    returned (its text is cut), the ones after it are not, even when they
    came in the same output."""
    story = ids(STORY)
    # the first prefix whose text holds the stop string
    k = next(k for k in range(1, len(story) + 1) if "STOP" in TOK.decode(story[:k]))
    evs = events(pipeline(stop=["STOP"]), cut([*story, EOS], sizes))
    c = collected(evs)
    assert c.text() == STORY[: STORY.index("STOP")]
    assert c.stop_reason == "STOP"
    assert c.token_ids == story[:k]
    assert streamed_ids(evs) == story[:k]


@settings(max_examples=30, deadline=None)
@given(sizes=splits, limit=st.integers(1, 12))
def test_max_tokens_keeps_as_many_ids_as_it_counted(sizes: list[int], limit: int) -> None:
    story = ids(STORY)
    evs = events(pipeline(max_tokens=limit), cut([*story, EOS], sizes))
    c = collected(evs)
    assert c.finish_reason == "length"
    assert c.token_ids == story[:limit]


def test_not_asked_no_event_carries_ids() -> None:
    evs = events(pipeline(keep_ids=False), cut([*ids(CALL_TEXT), EOS], [2]))
    assert all(e.token_ids is None for e in evs)
    assert collected(evs).token_ids == []


def test_a_text_out_engine_has_no_ids_to_give() -> None:
    pipe = pipeline()
    outs = [EngineOutput(text=ch) for ch in "hi"] + [EngineOutput(finish="length")]
    evs = events(pipe, outs)
    assert collected(evs).text() == "hi"
    assert streamed_ids(evs) == []
