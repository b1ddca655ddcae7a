"""Coalesced SSE writes: the client reads exactly the bytes the body yielded,
however its events were spread over time; events ready together share a
write; a source that breaks or is closed mid-step behaves as with `await`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.api.coalesce import FIRST_PARTS, MAX_PARTS, Coalescer
from rotor.api.sse_response import SSEResponse

# A stream: chunks, each either ready at once or after the source waits.
chunks = st.lists(st.tuples(st.binary(min_size=1, max_size=40), st.booleans()), max_size=40)


async def source(items: list[tuple[bytes, bool]], log: list[str]) -> AsyncIterator[bytes]:
    """Yields each chunk, first waiting on a real future when its flag says so."""
    loop = asyncio.get_running_loop()
    try:
        for chunk, wait in items:
            if wait:
                fut = loop.create_future()
                loop.call_soon(fut.set_result, None)
                await fut
            yield chunk
    finally:
        log.append("closed")


def bursts(items: list[tuple[bytes, bool]], max_parts: int = MAX_PARTS) -> list[bytes]:
    """The writes expected: a new one wherever the source had to wait."""
    out: list[list[bytes]] = []
    for chunk, wait in items:
        if wait or not out or len(out[-1]) >= max_parts:
            out.append([])
        out[-1].append(chunk)
    return [b"".join(parts) for parts in out]


async def pull_all(c: Coalescer) -> list[bytes]:
    out = []
    while (batch := await c.pull()) is not None:
        out.append(batch)
    return out


@settings(max_examples=200, deadline=None)
@given(chunks)
def test_same_bytes_one_write_per_burst(items: list[tuple[bytes, bool]]) -> None:
    log: list[str] = []

    async def main() -> list[bytes]:
        return await pull_all(Coalescer(source(items, log)))

    writes = asyncio.run(main())
    assert b"".join(writes) == b"".join(c for c, _ in items)
    assert writes == bursts(items)
    assert log == ["closed"]


@settings(max_examples=100, deadline=None)
@given(chunks, st.integers(min_value=1, max_value=6))
def test_a_part_limit_splits_bursts_and_loses_nothing(
    items: list[tuple[bytes, bool]], max_parts: int
) -> None:
    log: list[str] = []

    async def main() -> list[bytes]:
        c = Coalescer(source(items, log))
        out = []
        while (batch := await c.pull(max_parts)) is not None:
            out.append(batch)
        return out

    writes = asyncio.run(main())
    assert writes == bursts(items, max_parts)
    assert log == ["closed"]


async def test_an_error_comes_after_the_chunks_before_it() -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"a"
        yield b"b"
        raise RuntimeError("bug")

    c = Coalescer(broken())
    assert await c.pull() == b"ab"
    with pytest.raises(RuntimeError, match="bug"):
        await c.pull()


async def test_closing_while_a_step_is_parked_runs_the_source_cleanup() -> None:
    log: list[str] = []
    gate = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        try:
            yield b"first"
            await gate.wait()  # never set: the next step parks here
            yield b"never"
        finally:
            log.append("cleaned")

    body = slow()
    c = Coalescer(body)
    assert await c.pull() == b"first"
    await c.aclose()
    assert log == ["cleaned"]
    await body.aclose()  # the source is not left running: closing it again is fine


async def test_cancelling_a_pull_cancels_the_source() -> None:
    log: list[str] = []
    gate = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        try:
            yield b"first"
            await gate.wait()
            yield b"never"
        except asyncio.CancelledError:
            log.append("cancelled")
            raise

    c = Coalescer(slow())
    assert await c.pull() == b"first"
    task = asyncio.ensure_future(c.pull())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == ["cancelled"]


async def test_sse_response_writes_a_burst_once_and_a_late_event_apart() -> None:
    """Through the ASGI response: three ready events are one body message, and
    the last event ends the body in its own message (no empty write after it)."""
    loop = asyncio.get_running_loop()

    async def body() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        yield b"data: 2\n\n"
        yield b"data: 3\n\n"
        fut = loop.create_future()
        loop.call_soon(fut.set_result, None)
        await fut
        yield b"data: 4\n\n"

    sent: list[dict[str, Any]] = []
    read = False

    async def receive() -> dict[str, Any]:
        nonlocal read
        if not read:
            read = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()
        return {}  # pragma: no cover

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(SSEResponse(body())({"type": "http"}, receive, send), 5)
    bodies = [(m["body"], m["more_body"]) for m in sent if m["type"] == "http.response.body"]
    assert bodies == [(b"data: 1\n\ndata: 2\n\ndata: 3\n\n", True), (b"data: 4\n\n", False)]


async def test_sse_response_sends_a_burst_at_the_start_in_a_short_first_write() -> None:
    """An engine that answered at once: the first write stops after FIRST_PARTS
    events (the rest would hold the first token back while they are
    formatted); the rest follow at once, the same bytes in all."""
    events = [f"data: {i}\n\n".encode() for i in range(30)]

    async def body() -> AsyncIterator[bytes]:
        for e in events:
            yield e

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}  # pragma: no cover

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(SSEResponse(body())({"type": "http"}, receive, send), 5)
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert bodies == [b"".join(events[:FIRST_PARTS]), b"".join(events[FIRST_PARTS:])]
