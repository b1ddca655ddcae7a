"""Each API's ready-made event bytes (`frames`, the per-token path) against
the general path (`event` → framing): for any sequence of events — text of
any characters, reasoning, tool calls, finishes, several choices — a stream
is byte for byte the same whichever path made each event, and `template`
cuts only where it is sure."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.api.anthropic.stream import FRAMING, MessageStream
from rotor.api.body import validated
from rotor.api.openai.chat import ChatShaper
from rotor.api.openai.completions import CompletionShaper
from rotor.api.responses.items import response_head
from rotor.api.responses.stream import ResponseStream
from rotor.api.sse import HOLE, NAMED, NUMBER_HOLE, OPENAI, Framing, sse_event, template
from rotor.pipeline.events import ChoiceEvent
from rotor.pipeline.parse.base import Content
from rotor.protocol.responses import ResponsesRequest

from support.shaper_events import events, started


def both_ways(make: Any, framing: Framing, evs: list[ChoiceEvent]) -> tuple[bytes, bytes]:
    """The stream's bytes with `frames` tried first (as api/respond.py
    writes it), and with every event through `event` and the framing."""
    fast, plain = make(), make()
    out_fast = [framing.frame(fast.start())]
    out_plain = [framing.frame(plain.start())]
    for ev in evs:
        data = fast.frames(ev)
        out_fast.append(data if data is not None else framing.frame(fast.event(ev)))
        out_plain.append(framing.frame(plain.event(ev)))
    out_fast.append(framing.frame(fast.finish()))
    out_plain.append(framing.frame(plain.finish()))
    return b"".join(out_fast), b"".join(out_plain)


@settings(max_examples=300, deadline=None)
@given(events(2), st.booleans())
def test_chat_chunks_are_the_same_bytes(evs: list[ChoiceEvent], usage: bool) -> None:
    resp = started(n=3)
    fast, plain = both_ways(lambda: ChatShaper(resp, "reasoning_content", usage), OPENAI, evs)
    assert fast == plain


@settings(max_examples=300, deadline=None)
@given(events(2), st.booleans())
def test_completion_chunks_are_the_same_bytes(evs: list[ChoiceEvent], echo: bool) -> None:
    resp = started(n=3)
    make = lambda: CompletionShaper(resp, echo=["say: "] if echo else None, n=3)  # noqa: E731
    fast, plain = both_ways(make, OPENAI, evs)
    assert fast == plain


@settings(max_examples=300, deadline=None)
@given(events(0))
def test_anthropic_events_are_the_same_bytes(evs: list[ChoiceEvent]) -> None:
    resp = started()
    fast, plain = both_ways(lambda: MessageStream(resp, "r1"), FRAMING, evs)
    assert fast == plain


@settings(max_examples=300, deadline=None)
@given(events(0))
def test_responses_events_are_the_same_bytes(evs: list[ChoiceEvent]) -> None:
    resp = started()
    req = validated(ResponsesRequest, {"model": "m", "input": "hi", "stream": True})
    head = response_head(req, resp.model, resp.created, "r1")
    fast, plain = both_ways(lambda: ResponseStream(head, resp, "r1"), NAMED, evs)
    assert fast == plain


def test_the_fast_path_is_taken_for_a_lone_text_piece() -> None:
    """The common event really takes the template (else the tests above
    would hold of a path never used)."""
    resp = started()
    assert ChatShaper(resp).frames(ChoiceEvent(0, [Content("hi")])) is not None
    assert CompletionShaper(resp).frames(ChoiceEvent(0, [Content("hi")])) is not None
    anthropic = MessageStream(resp, "r1")
    anthropic.event(ChoiceEvent(0, [Content("a")]))  # opens the text block
    assert anthropic.frames(ChoiceEvent(0, [Content("hi")])) is not None
    req = validated(ResponsesRequest, {"model": "m", "input": "hi", "stream": True})
    responses = ResponseStream(response_head(req, resp.model, resp.created, "r1"), resp, "r1")
    responses.event(ChoiceEvent(0, [Content("a")]))  # opens the message item
    assert responses.frames(ChoiceEvent(0, [Content("hi")])) is not None


def test_a_hole_anywhere_else_means_no_template() -> None:
    """A field that is the hole's own text cannot be cut safely: the shaper
    falls back to the general path. One that only holds it inside is fine."""
    event = ChoiceEvent(0, [Content("hi")])
    for model in (HOLE, f"odd{HOLE}name"):
        shaper, plain = ChatShaper(started(model=model)), ChatShaper(started(model=model))
        fast = shaper.frames(event)
        assert (fast is None) == (model == HOLE)
        assert (fast or OPENAI.frame(shaper.event(event))) == OPENAI.frame(plain.event(event))


@given(st.text(), st.integers(0, 10**12))
def test_template_fills_give_the_bytes_of_the_filled_event(text: str, number: int) -> None:
    event = {"type": "x", "n": NUMBER_HOLE, "text": HOLE, "tail": [1, None]}
    parts = template(sse_event(event), NUMBER_HOLE, HOLE)
    assert parts is not None
    filled = parts[0] + str(number).encode() + parts[1] + orjson.dumps(text) + parts[2]
    assert filled == sse_event({**event, "n": number, "text": text})
    assert template(sse_event({"a": HOLE, "b": HOLE})) is None
    assert template(sse_event({"a": HOLE, "b": NUMBER_HOLE}), NUMBER_HOLE, HOLE) is None
