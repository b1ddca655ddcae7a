"""A streamed response's driver (api/streamed.py's ShapedStream) makes the
shaping's bytes from the events put to it, in order, nothing lost, with the
failure's or the closing's tail last, for any events of every API; a bug
while shaping stops the events and ends the bytes with the failure; the
response's outcome is counted once."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.api.anthropic.stream import FRAMING, MessageStream
from rotor.api.metrics import Metrics
from rotor.api.observe import Observation
from rotor.api.openai.chat import ChatShaper
from rotor.api.openai.completions import CompletionShaper
from rotor.api.sse import OPENAI
from rotor.api.streamed import ShapedStream, Shaping
from rotor.pipeline.events import ChoiceEvent, Failure, ResponseFailed

from support.shaper_events import events, started
from support.shaping import break_chat_shaping


class Events:
    """A response's events as a source: all of them put when subscribed,
    then the end (failing when told)."""

    def __init__(self, evs: list[ChoiceEvent], failure: ResponseFailed | None) -> None:
        self.evs, self.failure = evs, failure
        self.stopped = False

    def subscribe(self, sink: Any) -> None:
        for ev in self.evs:
            if self.stopped:
                return
            sink.put(ev)
        if not self.stopped:
            sink.end(self.failure)

    def resume(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True


class Writer:
    """The SSE response's side: the bytes put, and how they ended."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.closed = self.failed = False

    def put(self, item: bytes) -> bool:
        self.parts.append(item)
        return True

    def end(self, error: Exception | None) -> None:
        if error is not None:
            self.parts.append(b"<failure>")
            self.failed = True
        self.closed = True


SHAPERS = {
    "chat": (lambda resp: ChatShaper(resp, "reasoning_content", True), OPENAI),
    "completions": (lambda resp: CompletionShaper(resp, n=3), OPENAI),
    "messages": (lambda resp: MessageStream(resp, "r1"), FRAMING),
}


def run_both(api: str, evs: list[ChoiceEvent], failure: ResponseFailed | None) -> tuple:
    """The bytes (and the outcome count) of the events driven through a
    ShapedStream, and of the same shaping folded by hand: opening, each
    event, the failure's or the closing's tail."""
    make, framing = SHAPERS[api]
    metrics = Metrics()
    outcomes = []
    for way in ("folded", "shaped"):
        resp = started(n=3)
        shaping = Shaping(partial(Observation, resp, metrics, way, True, 0.0), make(resp), framing)
        if way == "folded":
            data = shaping.opening() + b"".join(shaping.event(ev) for ev in evs)
            data += shaping.failed(failure) if failure is not None else shaping.closing()
            shaping.end(True)
        else:
            writer = Writer()
            shaped = ShapedStream(shaping, Events(evs, failure))
            shaped.subscribe(writer)
            assert writer.closed and not writer.failed
            shaped.finish(writer.closed)
            data = b"".join(writer.parts)
        status = "500" if failure is not None else "200"
        outcomes.append((data, metrics.outcome("m", way, "true", status)._value.get()))
    return tuple(outcomes)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(SHAPERS)), events(2), st.booleans())
def test_a_shaped_stream_makes_the_shapings_bytes(
    api: str, evs: list[ChoiceEvent], fails: bool
) -> None:
    if api == "messages":
        evs = [ChoiceEvent(0, e.pieces, e.logprobs, e.finished) for e in evs]
    failure = ResponseFailed(Failure("internal", "engine broke")) if fails else None
    (folded, folded_count), (shaped, shaped_count) = run_both(api, evs, failure)
    assert folded == shaped
    assert folded_count == shaped_count == 1


def test_a_bug_while_shaping_stops_the_events_and_ends_with_the_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rotor.pipeline.parse.base import Content

    evs = [ChoiceEvent(0, [Content(f"t{i}")]) for i in range(5)]
    resp = started()
    events_ = Events(evs, None)
    break_chat_shaping(monkeypatch, on_call=3)
    shaper = ChatShaper(resp)
    metrics = Metrics()
    shaping = Shaping(partial(Observation, resp, metrics, "chat", True, 0.0), shaper, OPENAI)
    writer = Writer()
    shaped = ShapedStream(shaping, events_)
    shaped.subscribe(writer)
    assert writer.failed and events_.stopped
    assert writer.parts[-1] == b"<failure>" and len(writer.parts) == 4  # opening, t0, t1
    shaped.finish(writer.closed)
    assert metrics.outcome("m", "chat", "true", "500")._value.get() == 1


def test_a_bug_while_opening_a_pushed_stream_ends_it_with_the_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The failure written, the events never started, the response counted
    as failed (nothing left open)."""
    from rotor.pipeline.parse.base import Content

    resp = started()
    events_ = Events([ChoiceEvent(0, [Content("t")])], None)

    def broken_start(self: ChatShaper) -> Any:
        raise RuntimeError("a bug in the opening")

    monkeypatch.setattr(ChatShaper, "start", broken_start)
    metrics = Metrics()
    shaping = Shaping(
        partial(Observation, resp, metrics, "chat", True, 0.0), ChatShaper(resp), OPENAI
    )
    writer = Writer()
    shaped = ShapedStream(shaping, events_)
    shaped.subscribe(writer)
    assert writer.parts == [b"<failure>"] and writer.failed and events_.stopped
    shaped.finish(writer.closed)
    assert metrics.outcome("m", "chat", "true", "500")._value.get() == 1
