"""A pushed choice (pipeline/generate.py's ChoiceRun) when rotor's own code
breaks mid-stream: a bug in its pipeline ends it with an internal failure,
as the pulled choice's response ends, never a stream left waiting."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.decode import ChoiceDecoder
from rotor.pipeline.events import ChoiceEvent, ResponseFailed, Usage
from rotor.pipeline.generate import ChoiceRun
from rotor.pipeline.parse.message import MessageParser
from rotor.protocol.engine import StopParams

from support.mocker import CARD, TOK
from support.mocker import request as make_request
from support.wait import wait_for_async


class Sink:
    def __init__(self) -> None:
        self.events: list[ChoiceEvent] = []
        self.end: Any = None

    def event(self, event: ChoiceEvent) -> bool:
        self.events.append(event)
        return True

    def ended(self) -> None:
        self.end = "ended"

    def failed(self, error: ResponseFailed) -> None:
        self.end = error.failure


async def _pushed_run(engine: MockerEngine) -> ChoiceRun:
    params = StopParams(max_tokens=400, ignore_eos=True)
    decoder = ChoiceDecoder(params, [], False, decoder=TOK.decoder(True), token_text=TOK.decode)
    pipe = ChoicePipeline(0, decoder, MessageParser())
    job = make_request(stop=params)
    run = ChoiceRun(engine, job, pipe, 0, Usage(0, [decoder]), True)
    await run.__anext__()  # the first event, as the frontend primes it
    return run


@pytest.fixture(params=[0.0, 1.0], ids=["step", "slices"])
async def engine(request: pytest.FixtureRequest) -> Any:
    # slices of 1 ms: several outputs a push, the case where "no more" matters
    mocker = MockerEngine(CARD, TOK, MockerConfig(speedup_ratio=0, step_slice_ms=request.param))
    await mocker.start()
    yield mocker
    await mocker.stop()


async def test_a_bug_in_a_pushed_choices_pipeline_ends_it_as_internal(
    engine: MockerEngine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run = await _pushed_run(engine)
    real, calls = ChoicePipeline.push, [0]

    def broken(self: ChoicePipeline, out: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:  # the second push after the first event
            raise KeyError("a pipeline bug")
        return real(self, out)

    monkeypatch.setattr(ChoicePipeline, "push", broken)
    sink = Sink()
    with caplog.at_level(logging.ERROR, "rotor.pipeline"):
        assert run.deliver(sink)
        await wait_for_async("the choice's end", lambda: sink.end is not None, 10)
    assert sink.end.kind == "internal" and "a pipeline bug" in sink.end.message
    assert len(sink.events) == 1  # what came before the bug, nothing after
    assert any("failed" in r.getMessage() for r in caplog.records if r.exc_info)
    await wait_for_async("the engine's request gone", lambda: engine.state().running == 0, 10)
