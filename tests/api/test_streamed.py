"""A streamed response's two drivers (api/streamed.py) make the same bytes
from the same events: `body` pulling them, `PushedBody` having them pushed
(as the mocker pushes through the choice pipeline), for any events of every
API, ending, failing, or breaking on a bug, and they count the response's
outcome alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
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
from rotor.api.streamed import PushedBody, Shaping, body
from rotor.pipeline.events import ChoiceEvent, Failure, ResponseFailed

from support.shaper_events import events, started
from support.shaping import break_chat_shaping


class Events:
    """A response's events, pullable and pushable, failing after them when told."""

    def __init__(self, evs: list[ChoiceEvent], failure: ResponseFailed | None) -> None:
        self.evs, self.failure = evs, failure
        self.stopped = False

    # pulled
    def __aiter__(self) -> AsyncIterator[ChoiceEvent]:
        return self._pull()

    async def _pull(self) -> AsyncIterator[ChoiceEvent]:
        for ev in self.evs:
            yield ev
        if self.failure is not None:
            raise self.failure

    async def aclose(self) -> None:
        pass

    # pushed (rotor.pipeline.generate.Pushable)
    pushable = True

    def deliver(self, sink: Any) -> bool:
        for ev in self.evs:
            if self.stopped:
                return True
            sink.event(ev)
        if self.failure is not None:
            sink.failed(self.failure)
        else:
            sink.ended()
        return True

    def resume(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True


class Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.closed = self.failed = False

    def write(self, data: bytes) -> bool:
        self.parts.append(data)
        return True

    def close(self, data: bytes) -> None:
        self.parts.append(data)
        self.closed = True

    def fail(self) -> None:
        self.parts.append(b"<failure>")
        self.closed = self.failed = True


SHAPERS = {
    "chat": (lambda resp: ChatShaper(resp, "reasoning_content", True), OPENAI),
    "completions": (lambda resp: CompletionShaper(resp, n=3), OPENAI),
    "messages": (lambda resp: MessageStream(resp, "r1"), FRAMING),
}


def run_both(api: str, evs: list[ChoiceEvent], failure: ResponseFailed | None) -> tuple:
    import asyncio

    make, framing = SHAPERS[api]
    metrics = Metrics()
    outcomes = []
    for way in ("pulled", "pushed"):
        resp = started(n=3)
        resp.events = Events(evs, failure)  # type: ignore[assignment]
        shaping = Shaping(partial(Observation, resp, metrics, way, True, 0.0), make(resp), framing)
        if way == "pulled":

            async def pull() -> bytes:
                return b"".join([chunk async for chunk in body(shaping, resp)])  # noqa: B023

            data = asyncio.run(pull())
        else:
            writer = Writer()
            pushed = PushedBody(shaping, resp)
            assert pushed.start(writer)
            pushed.finish(writer.closed)
            data = b"".join(writer.parts)
        status = "500" if failure is not None else "200"
        outcomes.append((data, metrics.outcome("m", way, "true", status)._value.get()))
    return tuple(outcomes)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(SHAPERS)), events(2), st.booleans())
def test_pulled_and_pushed_make_the_same_bytes(
    api: str, evs: list[ChoiceEvent], fails: bool
) -> None:
    if api == "messages":
        evs = [ChoiceEvent(0, e.pieces, e.logprobs, e.finished) for e in evs]
    failure = ResponseFailed(Failure("internal", "engine broke")) if fails else None
    (pulled, pulled_count), (pushed, pushed_count) = run_both(api, evs, failure)
    assert pulled == pushed
    assert pulled_count == pushed_count == 1


def test_a_bug_while_shaping_stops_the_events_and_ends_with_the_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rotor.pipeline.parse.base import Content

    evs = [ChoiceEvent(0, [Content(f"t{i}")]) for i in range(5)]
    resp = started()
    events_ = Events(evs, None)
    resp.events = events_  # type: ignore[assignment]
    break_chat_shaping(monkeypatch, on_call=3)
    shaper = ChatShaper(resp)
    metrics = Metrics()
    shaping = Shaping(partial(Observation, resp, metrics, "chat", True, 0.0), shaper, OPENAI)
    writer = Writer()
    pushed = PushedBody(shaping, resp)
    assert pushed.start(writer)
    assert writer.failed and events_.stopped
    assert writer.parts[-1] == b"<failure>" and len(writer.parts) == 4  # opening, t0, t1
    pushed.finish(writer.closed)
    assert metrics.outcome("m", "chat", "true", "500")._value.get() == 1


def test_a_bug_while_opening_a_pushed_stream_ends_it_with_the_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As a pulled body that raised at its start: the failure written, the
    events stopped, the response counted as failed (nothing left open)."""
    from rotor.pipeline.parse.base import Content

    resp = started()
    events_ = Events([ChoiceEvent(0, [Content("t")])], None)
    resp.events = events_  # type: ignore[assignment]

    def broken_start(self: ChatShaper) -> Any:
        raise RuntimeError("a bug in the opening")

    monkeypatch.setattr(ChatShaper, "start", broken_start)
    metrics = Metrics()
    shaping = Shaping(
        partial(Observation, resp, metrics, "chat", True, 0.0), ChatShaper(resp), OPENAI
    )
    writer = Writer()
    pushed = PushedBody(shaping, resp)
    assert pushed.start(writer)
    assert writer.parts == [b"<failure>"] and writer.failed and events_.stopped
    pushed.finish(writer.closed)
    assert metrics.outcome("m", "chat", "true", "500")._value.get() == 1
