"""The mocker's fault switch (engines/base.Wedge, docs/cli.md#the-wedge-switch):
wedged, its step loop takes no step — requests are admitted and can be
aborted, the event loop goes on — until it is switched off, its time is up
(wall time, on the step loop's clock), or never for a step count reached
(`wedge_after_steps`); the steps before the wedge reach their readers."""

from __future__ import annotations

import asyncio
import math

import pytest

from rotor.engines.base import Wedge
from rotor.engines.mocker import MockerEngine
from rotor.protocol.engine import EngineOutput, pulled

from support.clock import FakeClock
from support.mocker import MakeEngine, ids_of, request

TURNS = 20  # turns of the event loop: a step loop that is not wedged steps in each


async def turns(n: int = TURNS) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def story(n: int) -> dict[str, object]:
    """A script of `n` tokens: the mocker plays it whole (the frontend
    counts max_tokens)."""
    return {"output": "".join(" a" for _ in range(n)), "end": "length"}


async def test_a_wedged_engine_takes_no_step_until_switched_off(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    assert isinstance(engine, Wedge) and engine.wedged() is None
    engine.wedge()
    assert engine.wedged() == math.inf
    outputs = pulled(engine.generate(request(story(5))))
    first = asyncio.ensure_future(outputs.__anext__())
    await turns()
    assert not first.done() and engine.state().steps == 0
    assert engine.state().active_requests == 1  # admitted, never stepped
    aborted = pulled(engine.generate(request(story(5))))  # an abort still ends a request
    pending = asyncio.ensure_future(aborted.__anext__())
    await turns()
    await aborted.aclose()
    pending.cancel()
    engine.unwedge()
    got: list[EngineOutput] = [await first]
    got += [out async for out in outputs]
    assert len(ids_of(got)) == 5 and engine.state().steps > 0 and engine.wedged() is None


async def test_a_timed_wedge_ends_on_its_own(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    clock, asked, fire = FakeClock(50.0), [], asyncio.Event()

    async def timer(seconds: float) -> None:  # the wedge's wait, fired by the test
        asked.append(seconds)
        await fire.wait()

    engine.step_loop.clock, engine.step_loop.sleep = clock, timer
    engine.wedge(5)
    assert engine.wedged() == 5
    outputs = pulled(engine.generate(request(story(3))))
    first = asyncio.ensure_future(outputs.__anext__())
    await turns()
    assert asked == [5] and not first.done()
    clock.now += 5
    fire.set()
    assert (await first).token_ids
    await outputs.aclose()
    with pytest.raises(ValueError, match="not -1"):
        engine.wedge(-1)


async def test_the_flag_wedges_after_its_steps_and_their_outputs_arrive(
    make_engine: MakeEngine,
) -> None:
    engine: MockerEngine = await make_engine(wedge_after_steps=3)
    outputs = pulled(engine.generate(request(story(10))))
    got: list[EngineOutput] = []
    reading = asyncio.ensure_future(_read(outputs, got))
    await turns()
    # the prefill step and two decode steps: three tokens, then nothing
    assert engine.state().steps == 3 and engine.wedged() == math.inf
    assert len(ids_of(got)) == 3 and not reading.done()
    engine.unwedge()
    await reading
    assert len(ids_of(got)) == 10 and engine.step_loop.wedges == 1


async def _read(outputs: object, into: list[EngineOutput]) -> None:
    async for out in outputs:  # type: ignore[attr-defined]
        into.append(out)
