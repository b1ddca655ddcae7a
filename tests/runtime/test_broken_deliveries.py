"""A stream whose sink raises (a bug in rotor's own code on the reader's
side): the stream stops, its sink is told it ended with that bug
(protocol/flow.SinkBroke, which each stage turns into its internal failure),
so what waits on it ends, never hangs; and other streams pushed in the same
turn are not held up by it."""

from __future__ import annotations

from typing import Any

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.protocol.engine import EngineOutput, StopParams, pulled
from rotor.protocol.flow import SinkBroke
from rotor.runtime.stream import OutputStream

from support.mocker import CARD, TOK
from support.mocker import request as make_request
from support.wait import wait_for_async


class Raising:
    """A sink that records what it is handed; raises in `put` or `end` when told."""

    def __init__(self, raise_in: str = "") -> None:
        self.raise_in = raise_in
        self.tokens: list[int] = []
        self.ends: list[Any] = []

    def put(self, item: EngineOutput) -> bool:
        if self.raise_in == "put":
            raise ValueError("a bug while handing outputs on")
        self.tokens += item.token_ids
        return True

    def end(self, error: Exception | None) -> None:
        self.ends.append(error)
        if self.raise_in == "end":
            raise ValueError("a bug in the closing event")


async def _nothing() -> None:
    pass


async def test_a_mocker_stream_whose_reader_raises_tells_it_and_stops() -> None:
    engine = MockerEngine(CARD, TOK, MockerConfig(speedup_ratio=0, step_slice_ms=0))
    await engine.start()
    try:
        stream = pulled(
            engine.generate(make_request(stop=StopParams(max_tokens=50, ignore_eos=True)))
        )
        await stream.__anext__()
        sink = Raising(raise_in="put")
        stream.subscribe(sink)
        await wait_for_async("the sink told", lambda: bool(sink.ends), 10)
        (error,) = sink.ends
        assert isinstance(error, SinkBroke) and "a bug while handing outputs on" in str(error)
        await wait_for_async("the request gone", lambda: engine.state().running == 0, 10)
    finally:
        await engine.stop()


def _stream(who: str, abort: Any = lambda: None) -> OutputStream:
    return OutputStream(1, who, _nothing, abort=abort)


async def _pushed_reading(stream: OutputStream, sink: Raising) -> None:
    reading = pulled(stream)
    stream.put(0, "outputs", [EngineOutput(token_ids=[1])])
    await reading.__anext__()
    reading.subscribe(sink)


async def test_a_remote_reader_that_raises_tells_it_and_aborts() -> None:
    aborted: list[int] = []
    stream = _stream("w", abort=lambda: aborted.append(1))
    sink = Raising(raise_in="put")
    await _pushed_reading(stream, sink)
    stream.put(1, "outputs", [EngineOutput(token_ids=[2])])
    await wait_for_async("the sink told", lambda: bool(sink.ends), 10, pause=0)
    assert isinstance(sink.ends[0], SinkBroke) and aborted == [1]


async def test_one_reader_failing_at_its_end_holds_up_no_other() -> None:
    streams = [_stream(f"w{i}") for i in range(3)]
    broken, healthy, later = Raising(raise_in="end"), Raising(), Raising()
    await _pushed_reading(streams[0], broken)
    await _pushed_reading(streams[1], healthy)
    for stream in streams[:2]:  # one worker's batch: both end in the same turn
        stream.put(1, "outputs", [EngineOutput(token_ids=[2], finish="length")])
        stream.put(2, "done", None)
    await wait_for_async("the healthy stream's end", lambda: bool(healthy.ends), 10, pause=0)
    assert healthy.tokens == [2] and healthy.ends == [None]
    assert broken.ends == [None]  # told once: its own `end` raised, it is not told again
    # and a stream pushed in a later turn still gets its end
    await _pushed_reading(streams[2], later)
    streams[2].put(1, "done", None)
    await wait_for_async("a later stream's end", lambda: bool(later.ends), 10, pause=0)
