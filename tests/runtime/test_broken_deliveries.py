"""A pushed stream whose reader raises (a bug in rotor's own code on the
reader's side): the stream stops, its reader is told it ended with an
internal error (so what waits on it ends, never hangs), and other streams
pushed in the same turn are not held up by it."""

from __future__ import annotations

from typing import Any

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.protocol.engine import EngineError, EngineOutput, StopParams
from rotor.runtime.stream import OutputStream

from support.mocker import CARD, TOK
from support.mocker import request as make_request
from support.wait import wait_for_async


class Delivery:
    """Records what it is handed; raises in `outputs` or `ended` when told."""

    def __init__(self, raise_in: str = "") -> None:
        self.raise_in = raise_in
        self.tokens: list[int] = []
        self.ends: list[Any] = []

    def outputs(self, outputs: list[EngineOutput]) -> bool:
        if self.raise_in == "outputs":
            raise ValueError("a bug while handing outputs on")
        self.tokens += [t for out in outputs for t in out.token_ids]
        return True

    def ended(self, error: EngineError | None) -> None:
        self.ends.append(error)
        if self.raise_in == "ended":
            raise ValueError("a bug in the closing event")


async def _nothing() -> None:
    pass


async def test_a_mocker_stream_whose_reader_raises_tells_it_and_stops() -> None:
    engine = MockerEngine(CARD, TOK, MockerConfig(speedup_ratio=0, step_slice_ms=0))
    await engine.start()
    try:
        stream: Any = engine.generate(make_request(stop=StopParams(max_tokens=50, ignore_eos=True)))
        await stream.__anext__()
        delivery = Delivery(raise_in="outputs")
        stream.deliver(delivery)
        await wait_for_async("the reader told", lambda: bool(delivery.ends), 10)
        (error,) = delivery.ends
        assert error.kind == "internal" and "a bug while handing outputs on" in error.message
        await wait_for_async("the request gone", lambda: engine.state().running == 0, 10)
    finally:
        await engine.stop()


async def _pushed_reading(stream: OutputStream, delivery: Delivery) -> None:
    reading = stream.read(_nothing)
    stream.put(0, "outputs", [EngineOutput(token_ids=[1])])
    await reading.__anext__()
    reading.deliver(delivery)


async def test_a_remote_reader_that_raises_tells_it_and_aborts() -> None:
    aborted: list[int] = []
    stream = OutputStream(1, "w", abort=lambda: aborted.append(1))
    delivery = Delivery(raise_in="outputs")
    await _pushed_reading(stream, delivery)
    stream.put(1, "outputs", [EngineOutput(token_ids=[2])])
    await wait_for_async("the reader told", lambda: bool(delivery.ends), 10, pause=0)
    assert delivery.ends[0].kind == "internal" and aborted == [1]


async def test_one_reader_failing_at_its_end_holds_up_no_other() -> None:
    streams = [OutputStream(1, f"w{i}", abort=lambda: None) for i in range(3)]
    broken, healthy, later = Delivery(raise_in="ended"), Delivery(), Delivery()
    await _pushed_reading(streams[0], broken)
    await _pushed_reading(streams[1], healthy)
    for stream in streams[:2]:  # one worker's batch: both end in the same turn
        stream.put(1, "outputs", [EngineOutput(token_ids=[2], finish="length")])
        stream.put(2, "done", None)
    await wait_for_async("the healthy stream's end", lambda: bool(healthy.ends), 10, pause=0)
    assert healthy.tokens == [2] and healthy.ends == [None]
    assert broken.ends == [None]  # told once: its own `ended` raised, it is not told again
    # and a stream pushed in a later turn still gets its end
    await _pushed_reading(streams[2], later)
    streams[2].put(1, "done", None)
    await wait_for_async("a later stream's end", lambda: bool(later.ends), 10, pause=0)
