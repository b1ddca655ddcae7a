"""A choice pulled and the same choice pushed (pipeline/generate.py's
ChoiceRun): over an engine that is a generator or one that pushes, for any
engine outputs cut into any batches it might push them in, read to its end
or switched to a sink after its first event (as the frontend does), the
same events in the same order, the same failure, and one abort when the
frontend ends the choice itself — and the real mocker's push gives what its
pull gives."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.decode import ChoiceDecoder
from rotor.pipeline.events import ChoiceEvent, ResponseFailed, Usage
from rotor.pipeline.generate import ChoiceRun
from rotor.pipeline.parse.message import MessageParser
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest, StopParams
from rotor.protocol.flow import Pulled, Pump

from support.mocker import CARD, TOK, request
from support.wait import wait_for_async

EOS = CARD.eos_token_ids[0]


class Scripted:
    """An engine whose one stream gives `outputs` (then `error`, if any): a
    generator (pumped, as echo's and vLLM's are), or a source that pushes
    them in `batches`, a batch a turn of the event loop."""

    def __init__(
        self, outputs: list[EngineOutput], batches: list[int], error: EngineError | None, push: bool
    ) -> None:
        self.outputs, self.batches, self.error, self.push = outputs, batches, error, push
        self.stops = 0
        self.subscribed = 0

    def generate(self, request: EngineRequest) -> Any:
        return _PushStream(self) if self.push else Pump(self._pull())

    async def _pull(self) -> AsyncIterator[EngineOutput]:
        for out in self.outputs:
            yield out
        if self.error is not None:
            raise self.error


class _PushStream:
    def __init__(self, engine: Scripted) -> None:
        self.engine = engine
        self.left = list(engine.outputs)
        self.sizes = iter(engine.batches)
        self.sink: Any = None
        self.stopped = False

    def subscribe(self, sink: Any) -> None:
        self.engine.subscribed += 1
        self.sink = sink
        asyncio.get_running_loop().call_soon(self._step)

    def _step(self) -> None:
        """A delivery point: the next batch, then the next turn's."""
        if self.stopped:
            return
        size = max(1, next(self.sizes, 1))
        batch, self.left = self.left[:size], self.left[size:]
        for out in batch:
            self.sink.put(out)
            if self.stopped:
                return
        if self.left:
            asyncio.get_running_loop().call_soon(self._step)
        else:
            self.sink.end(self.engine.error)

    def resume(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True
        self.engine.stops += 1


class Sink:
    def __init__(self) -> None:
        self.events: list[ChoiceEvent] = []
        self.end_: Any = None

    def put(self, item: ChoiceEvent) -> bool:
        self.events.append(item)
        return True

    def end(self, error: Exception | None) -> None:
        if error is None:
            self.end_ = "ended"
        else:
            assert isinstance(error, ResponseFailed)
            self.end_ = ("failed", error.failure.message)


def _choice(max_tokens: int, stops: list[str]) -> tuple[ChoicePipeline, Usage]:
    params = StopParams(max_tokens=max_tokens, eos_token_ids=[EOS])
    decoder = ChoiceDecoder(params, stops, False, decoder=TOK.decoder(True), token_text=TOK.decode)
    pipe = ChoicePipeline(0, decoder, MessageParser())
    return pipe, Usage(0, [decoder])


def _outputs(ids: list[list[int]], finish: str | None) -> list[EngineOutput]:
    outs = [EngineOutput(token_ids=list(chunk)) for chunk in ids]
    if outs and finish is not None:
        outs[-1].finish = finish
        if finish == "eos":
            outs[-1].token_ids.append(EOS)
            outs[-1].matched = EOS
    return outs


def _key(e: ChoiceEvent) -> tuple:
    finished = e.finished and (e.finished.finish_reason, e.finished.stop_reason, e.finished.end)
    return (e.index, [(type(p).__name__, getattr(p, "text", None)) for p in e.pieces], finished)


async def _run(engine: Scripted, max_tokens: int, stops: list[str], push: bool) -> tuple:
    """The choice's events and its end: its first event pulled (as the
    frontend waits for it), then the rest pulled too, or (`push`) pushed to
    a sink subscribed in its place (the switch)."""
    pipe, usage = _choice(max_tokens, stops)
    run = Pulled(ChoiceRun(engine, EngineRequest("r", CARD.name, [1]), pipe, 0, usage, True))
    events: list[ChoiceEvent] = []
    try:
        events.append(await run.__anext__())  # the first, as the frontend waits for it
    except (StopAsyncIteration, ResponseFailed) as e:
        return [], repr(e)
    if push:
        sink = Sink()
        run.subscribe(sink)
        await wait_for_async("the choice's end", lambda: sink.end_ is not None, 10, pause=0)
        return [_key(e) for e in events + sink.events], sink.end_
    try:
        async for event in run:
            events.append(event)
    except ResponseFailed as e:
        return [_key(x) for x in events], ("failed", e.failure.message)
    return [_key(e) for e in events], "ended"


ids = st.lists(st.lists(st.integers(3, 300), min_size=1, max_size=3), min_size=1, max_size=20)


@settings(max_examples=300, deadline=None)
@given(
    ids,
    st.sampled_from([None, "stop", "length", "eos", "error"]),
    st.lists(st.integers(1, 5), max_size=10),
    st.integers(1, 40),
    st.lists(st.sampled_from(["a", "b", "ab", "\n"]), max_size=2),
    st.booleans(),
)
def test_pushed_choices_make_the_pulled_events(
    chunks: list[list[int]],
    finish: str | None,
    batches: list[int],
    max_tokens: int,
    stops: list[str],
    broken: bool,
) -> None:
    """Over a generator engine or a pushing one, read to the end or switched
    to a sink after the first event: the same events, the same end."""
    error = EngineError("the engine broke", "internal") if broken and finish is None else None
    results = []
    engines = []
    for push_engine in (False, True):
        for push_events in (False, True):
            engine = Scripted(_outputs(chunks, finish), batches, error, push_engine)
            engines.append(engine)
            results.append(asyncio.run(_run(engine, max_tokens, stops, push_events)))
    assert all(r == results[0] for r in results[1:])
    pulled = results[0]
    if pulled[1] == "ended" and pulled[0]:
        assert pulled[0][-1][2] is not None  # every choice ends in an event with its finish
    for engine in engines:
        assert engine.stops <= 1  # the frontend ends it once, or the engine did
    assert all(engine.subscribed == 1 for engine in engines if engine.push)


def test_the_scripted_stream_is_really_pushed() -> None:
    """(The property above compares two paths only if the pushed one is taken:
    the events after the switch reach the sink from the engine's own turns.)"""
    engine = Scripted(_outputs([[3], [4], [5]], "length"), [1], None, True)
    events, end = asyncio.run(_run(engine, 10, [], True))
    assert engine.subscribed == 1 and end == "ended" and len(events) == 3


def test_a_sink_that_stops_the_choice_mid_batch_gets_no_more_of_it() -> None:
    """(A reader whose own work broke stops the choice: the rest of the batch
    the engine pushed is not turned into events for it.)"""
    engine = Scripted(_outputs([[3], [4], [5], [6], [7], [8], [9]], "length"), [7], None, True)
    pipe, usage = _choice(10, [])
    run = ChoiceRun(engine, EngineRequest("r", CARD.name, [1]), pipe, 0, usage, True)

    class Stopping(Sink):
        def put(self, item: ChoiceEvent) -> bool:
            super().put(item)
            if len(self.events) == 2:
                run.stop()
                return False
            return True

    async def go() -> Stopping:
        sink = Stopping()
        run.subscribe(sink)
        for _ in range(5):
            await asyncio.sleep(0)
        return sink

    sink = asyncio.run(go())
    assert len(sink.events) == 2 and sink.end_ is None and engine.stops == 1


@pytest.mark.parametrize("slice_ms", [0.0, 1.0])
async def test_a_bug_in_a_pushed_choices_pipeline_ends_it_as_internal(
    slice_ms: float, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in a choice's pipeline ends it as an internal failure, logged;
    never a stream left waiting."""
    engine = MockerEngine(CARD, TOK, MockerConfig(speedup_ratio=0, step_slice_ms=slice_ms))
    await engine.start()
    try:
        pipe, usage = _choice(400, [])
        job = request(stop=StopParams(max_tokens=400, ignore_eos=True))
        run = Pulled(ChoiceRun(engine, job, pipe, 0, usage, True))
        await run.__anext__()  # the first event, as the frontend waits for it
        real, calls = ChoicePipeline.feed, [0]

        def broken(self: ChoicePipeline, out: EngineOutput) -> Any:
            calls[0] += 1
            if calls[0] == 2:  # the second output after the first event
                raise KeyError("a pipeline bug")
            return real(self, out)

        monkeypatch.setattr(ChoicePipeline, "feed", broken)
        sink = Sink()
        with caplog.at_level(logging.ERROR, "rotor.pipeline"):
            run.subscribe(sink)
            await wait_for_async("the choice's end", lambda: sink.end_ is not None, 10, pause=0)
        assert sink.end_ == ("failed", "KeyError: 'a pipeline bug'")  # (an internal failure's)
        assert len(sink.events) == 1  # what came before the bug, nothing after
        assert any(r.exc_info for r in caplog.records)
        await wait_for_async("the request gone", lambda: engine.state().running == 0, 10, pause=0)
    finally:
        await engine.stop()


@pytest.mark.parametrize("slice_ms", [0.0, 1.0])
async def test_the_mockers_pushed_choice_is_its_pulled_one(slice_ms: float) -> None:
    engine = MockerEngine(CARD, TOK, MockerConfig(speedup_ratio=0, step_slice_ms=slice_ms))
    await engine.start()
    try:
        results = []
        for push in (False, True):
            pipe, usage = _choice(500, [])
            job = request(stop=StopParams(max_tokens=500, ignore_eos=True))
            job.sampling.seed = 11
            run = Pulled(ChoiceRun(engine, job, pipe, 0, usage, True))
            events = [await run.__anext__()]
            if push:
                sink = Sink()
                run.subscribe(sink)
                ended = lambda sink=sink: sink.end_ is not None  # noqa: E731
                await wait_for_async("the pushed choice to end", ended, pause=0)
                events += sink.events
            else:
                events += [e async for e in run]
            text = "".join(p.text for e in events for p in e.pieces)  # type: ignore[union-attr]
            results.append((text, events[-1].finished.finish_reason, usage.completion_tokens))  # type: ignore[union-attr]
        assert results[0] == results[1]
        assert results[0][1:] == ("length", 500)
        state = engine.state()
        assert (state.active_requests, state.running) == (0, 0)
    finally:
        await engine.stop()
