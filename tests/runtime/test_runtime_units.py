"""The runtime's pure parts: stream messages, sequence checks, silence and
stalls, embed runs (the router's parts are tests/router's, the merge of
piled-up outputs tests/protocol/test_engine.py's)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from rotor.protocol.engine import EngineError, EngineOutput, pulled
from rotor.runtime.nats import messages as wire
from rotor.runtime.nats.request_plane import embed_runs
from rotor.runtime.stream import OutputStream


def test_stream_messages_round_trip_and_reject_junk() -> None:
    assert wire.parse(wire.message(3, wire.OUTPUTS, b"xy")) == (3, wire.OUTPUTS, b"xy")
    assert wire.parse(wire.message(0, wire.DONE)) == (0, wire.DONE, None)
    for bad in (b"", wire.message(1, "z"), b"\x81\xa1s\xa1x"):
        with pytest.raises(ValueError):
            wire.parse(bad)


async def nothing() -> None:
    pass


def stream_of(n: int = 1) -> tuple[OutputStream, list[int]]:
    """A stream and the list its aborts are counted in."""
    aborts: list[int] = []
    return OutputStream(n, "worker w", nothing, abort=lambda: aborts.append(1)), aborts


async def test_sequence_numbers_catch_gaps_and_drop_repeats() -> None:
    stream, aborts = stream_of()
    stream.put(0, "outputs", [EngineOutput(0, [1])])
    stream.put(1, "outputs", [EngineOutput(0, [2])])
    stream.put(1, "outputs", [EngineOutput(0, [2])])  # a repeat: dropped, never passed on
    stream.put(4, "outputs", [EngineOutput(0, [5])])
    got: list[int] = []
    with pytest.raises(EngineError, match="lost stream messages 2..3") as e:
        async for out in pulled(stream):
            got.extend(out.token_ids)
    assert got == [1, 2]  # what came in order went on; the gap ended the stream
    assert e.value.kind == "unavailable"
    assert aborts == [1]  # the request is stopped on the worker


async def test_a_stream_whose_choices_all_finished_is_not_aborted() -> None:
    """The reader leaves after the last choice's finish, before the worker's
    end message: nothing is left to stop, so no abort is sent."""
    stream, aborts = stream_of(n=2)
    stream.put(0, "outputs", [EngineOutput(0, [1], finish="eos"), EngineOutput(1, [2])])
    reader = pulled(stream)
    assert (await reader.__anext__()).finish == "eos"
    stream.put(1, "outputs", [EngineOutput(1, [3], finish="length")])
    await reader.__anext__()
    assert (await reader.__anext__()).finish == "length"
    await reader.aclose()
    assert aborts == []
    early, early_aborts = stream_of(n=2)
    early.put(0, "outputs", [EngineOutput(0, [1], finish="eos")])
    reader = pulled(early)
    await reader.__anext__()
    await reader.aclose()  # choice 1 still runs: it is stopped, once
    assert early_aborts == [1]


def test_a_waiting_stream_stays_cancelled_when_a_message_lands_in_the_same_turn() -> None:
    """The client leaves (the frontend cancels the stream's reader) in the
    turn a worker message arrives: the cancel must win, or the frontend goes
    on streaming to nobody and the worker never hears of an abort."""

    async def main() -> tuple[bool, list[int]]:
        stream, aborts = stream_of()
        reader = pulled(stream)
        first = asyncio.ensure_future(reader.__anext__())
        await asyncio.sleep(0)  # the reader subscribes, the request is sent
        await asyncio.sleep(0)  # and it waits
        stream.put(0, "outputs", [EngineOutput(0, [1])])
        await asyncio.sleep(0)  # the message reaches the reader's inbox, and wakes it
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        return first.cancelled(), aborts

    cancelled, aborts = asyncio.run(main())
    assert cancelled
    assert aborts == [1]  # the worker hears of it


def test_a_silent_stream_times_out() -> None:
    async def main() -> None:
        stream = OutputStream(1, "worker w", nothing, abort=lambda: None, silence=0.01)
        with pytest.raises(EngineError, match="worker w stopped answering") as e:
            await pulled(stream).__anext__()
        assert e.value.cause == "timeout"

    asyncio.run(main())


async def test_a_queued_request_may_wait_but_a_stalled_answer_times_out() -> None:
    """The stall limit counts from the first output: heartbeats alone keep a
    request waiting in a busy engine's queue alive however long it waits;
    after its first token, heartbeats without output past the limit are a
    stuck engine (a timeout, so the request migrates)."""
    now = [0.0]
    stream = OutputStream(
        1, "worker w", nothing, abort=lambda: None, stall=30, clock=lambda: now[0]
    )
    reader = pulled(stream)
    seq = 0

    async def beat(seconds: float) -> None:
        """`seconds` pass, then a heartbeat, and the reader reads it."""
        nonlocal seq
        now[0] += seconds
        stream.put(seq, "heartbeat", None)
        seq += 1
        for _ in range(5):
            await asyncio.sleep(0)

    waiting = asyncio.ensure_future(reader.__anext__())
    for _ in range(10):  # 100 s in the queue, heartbeats only: still waiting
        await beat(10)
    assert not waiting.done()
    stream.put(seq, "outputs", [EngineOutput(token_ids=[1])])
    seq += 1
    assert (await waiting).token_ids == [1]
    stalled = asyncio.ensure_future(reader.__anext__())
    await beat(20)  # 20 s after the first token: within the limit
    assert not stalled.done()
    await beat(11)  # 31 s without output: stuck
    with pytest.raises(EngineError, match="sent no output for 30 s") as e:
        await stalled
    assert e.value.cause == "timeout"


def test_embed_runs_keep_the_order_and_fit_the_limit() -> None:
    inputs = [[1] * n for n in (10, 10, 10, 50, 1, 400, 2)]
    runs = embed_runs(inputs, width=4, limit=120)
    assert [ids for run in runs for ids in run] == inputs  # every input, in order
    for run in runs:
        asked = sum(5 * len(ids) + 8 for ids in run)
        answered = len(run) * (5 * 4 + 8)
        assert len(run) == 1 or (asked <= 120 and answered <= 120)
    assert [len(run) for run in runs] == [2, 1, 1, 1, 1, 1]  # the 400-token input alone
    # the answers decide when the vectors are wide: 508 bytes each, one per 1000-byte run
    assert [len(run) for run in embed_runs([[1]] * 10, width=100, limit=1000)] == [1] * 10
