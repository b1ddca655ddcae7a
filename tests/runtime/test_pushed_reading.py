"""A transport's stream (runtime/stream.py's OutputStream) read by push —
its first output pulled, then a sink subscribed in the reader's place —
gets what a reader that pulls it all gets: every token of every choice and
the same end, whatever messages come (gaps, repeats, errors) in whatever
turns; and the silence limit holds without a waiting reader.
(A pool's pushed stream, migrated under its reader, is tests/router/test_pool.py's.)"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.protocol.engine import EngineError, EngineOutput, pulled
from rotor.runtime.stream import OutputStream

from support.clock import FakeClock
from support.sinks import Outputs


async def _nothing() -> None:
    pass


# A message: (seq offset from the next expected, kind, tokens)
messages = st.lists(
    st.tuples(
        st.sampled_from([0, 0, 0, 0, 1, -1]),  # mostly in order; a gap, a repeat
        st.sampled_from(["outputs", "outputs", "outputs", "heartbeat", "done", "error"]),
        st.lists(st.integers(1, 50), min_size=1, max_size=3),
        st.integers(0, 1),  # the choice
        st.booleans(),  # a turn ends after it
    ),
    min_size=1,
    max_size=25,
)


def _feed(stream: OutputStream, plan: list[tuple]) -> list[tuple]:
    """The messages of `plan` as (seq, kind, payload), turn by turn."""
    out, seq = [], 0
    for offset, kind, ids, index, _ in plan:
        s = max(0, seq + offset)
        if kind == "outputs":
            payload: Any = [EngineOutput(index=index, token_ids=list(ids))]
        elif kind == "error":
            payload = EngineError("the engine broke", "internal")
        else:
            payload = None
        out.append((s, kind, payload))
        if offset == 0:
            seq += 1
    return out


async def _pulled(plan: list[tuple]) -> tuple[dict[int, list[int]], Any]:
    stream = OutputStream(2, "w", _nothing, abort=lambda: None)
    reading = pulled(stream)
    got: dict[int, list[int]] = {0: [], 1: []}
    for seq, kind, payload in _feed(stream, plan):
        stream.put(seq, kind, payload)
    stream.put(10_000, "done", None)  # a stream that never ended ends with a gap here
    try:
        async for out in reading:
            got[out.index] += out.token_ids
    except EngineError as e:
        return got, e.message
    return got, None


async def _pushed(plan: list[tuple]) -> tuple[dict[int, list[int]], Any]:
    stream = OutputStream(2, "w", _nothing, abort=lambda: None)
    reading = pulled(stream)
    fed = _feed(stream, plan) + [(10_000, "done", None)]
    turns = [step[4] for step in plan] + [True]
    got: dict[int, list[int]] = {0: [], 1: []}
    first = asyncio.ensure_future(reading.__anext__())  # pulled until its first output
    i = 0
    while not first.done():
        if i < len(fed):
            stream.put(*fed[i])
            i += 1
        await asyncio.sleep(0)
    try:
        out = first.result()
    except StopAsyncIteration:
        return got, None
    except EngineError as e:
        return got, e.message
    got[out.index] += out.token_ids
    sink = Outputs()
    reading.subscribe(sink)  # the switch: the rest pushed
    for item, turn_ends in zip(fed[i:], turns[i:], strict=True):
        stream.put(*item)
        if turn_ends:
            await asyncio.sleep(0)
    for _ in range(3):
        await asyncio.sleep(0)
    for out in sink.outputs_:
        got[out.index] += out.token_ids
    assert sink.ending != "open"
    return got, sink.ending


@settings(max_examples=300, deadline=None)
@given(messages)
def test_a_pushed_reading_gets_what_a_pulled_one_gets(plan: list[tuple]) -> None:
    assert asyncio.run(_pushed(plan)) == asyncio.run(_pulled(plan))


async def test_the_silence_limit_holds_without_a_waiting_reader() -> None:
    clock = FakeClock(100.0)
    stream = OutputStream(1, "worker w", _nothing, abort=lambda: None, silence=4.0, clock=clock)
    reading = pulled(stream)
    stream.put(0, "outputs", [EngineOutput(token_ids=[1])])
    assert (await reading.__anext__()).token_ids == [1]
    sink = Outputs()
    reading.subscribe(sink)
    clock.now += 3
    stream._check()  # the stream's own timer, fired by hand on the injected clock
    assert sink.ending == "open"
    clock.now += 2
    stream._check()
    await asyncio.sleep(0)  # the failure reaches the sink at the turn's end
    assert sink.ending == "worker w stopped answering"
