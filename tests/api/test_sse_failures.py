"""SSEResponse driven by a tiny ASGI harness: a source that fails mid-stream
is a bug to log, not a client that left, and the stream still ends cleanly;
the first bytes leave from the response's own task, the middle ones skip
the middleware, a slow client holds the source and resumes it, a stream the
server ends counts as cut short. The bodies here are generators pumped into
sources (protocol/flow.Pump), as echo's and vLLM's streams are."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from rotor.api.drain import OpenStreams
from rotor.api.errors import INTERNAL_ERROR, error_body
from rotor.api.metrics import Metrics
from rotor.api.observe import observed
from rotor.api.sse import OPENAI, SERVER_SEND
from rotor.api.sse_response import SSEResponse
from rotor.frontend import StartedResponse
from rotor.model.card import ModelCard
from rotor.pipeline.events import ChoiceEvent, Usage
from rotor.pipeline.served import ServedModel
from rotor.protocol.flow import Pulled, Pump

TIMEOUT_S = 5


class Client:
    """The ASGI side of one connection: what was sent, and a `receive` that
    reports a disconnect only once `leave()` is called."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self._left = asyncio.Event()
        self._read = False

    def leave(self) -> None:
        self._left.set()

    async def receive(self) -> dict[str, Any]:
        if not self._read:
            self._read = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [m for m in self.sent if m["type"] == "http.response.body"]

    @property
    def text(self) -> bytes:
        return b"".join(m["body"] for m in self.bodies)


async def serve(response: SSEResponse, client: Client) -> None:
    await asyncio.wait_for(response({"type": "http"}, client.receive, client.send), TIMEOUT_S)


async def failing_body() -> AsyncIterator[bytes]:
    yield b"data: 1\n\n"
    raise RuntimeError("boom in the body")


def counter() -> tuple[list[int], Callable[[], None]]:
    calls: list[int] = []
    return calls, lambda: calls.append(1)


async def test_a_raising_body_is_logged_and_not_a_disconnect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gone, on_disconnect = counter()
    client = Client()
    with caplog.at_level(logging.ERROR):
        response = SSEResponse(Pump(failing_body()), {"x-request-id": "r-1"}, on_disconnect)
        await serve(response, client)
    assert gone == []
    assert client.sent[0]["type"] == "http.response.start"
    assert client.bodies[-1]["more_body"] is False
    assert all(m["more_body"] for m in client.bodies[:-1])
    assert client.text == b"data: 1\n\n"
    (record,) = [r for r in caplog.records if r.exc_info]
    assert "r-1" in record.getMessage()
    assert "boom in the body" in str(record.exc_info[1])


async def test_the_framings_failure_event_ends_a_broken_stream() -> None:
    gone, on_disconnect = counter()
    client = Client()
    response = SSEResponse(
        Pump(failing_body()),
        None,
        on_disconnect,
        failure=lambda: OPENAI.tail([error_body(500, INTERNAL_ERROR)]),
    )
    await serve(response, client)
    assert gone == []
    assert client.text.startswith(b"data: 1\n\ndata: {")
    assert client.text.endswith(b"data: [DONE]\n\n")
    assert INTERNAL_ERROR.encode() in client.text
    assert b"boom" not in client.text  # the details are for the log
    assert client.bodies[-1]["more_body"] is False


async def test_a_client_that_leaves_is_still_counted() -> None:
    gone, on_disconnect = counter()
    client = Client()
    closed = asyncio.Event()

    async def slow_body() -> AsyncIterator[bytes]:
        try:
            yield b"data: 1\n\n"
            client.leave()
            await asyncio.sleep(TIMEOUT_S * 2)
            yield b"data: never\n\n"
        finally:
            closed.set()

    await serve(SSEResponse(Pump(slow_body()), None, on_disconnect), client)
    assert gone == [1]
    await asyncio.wait_for(closed.wait(), TIMEOUT_S)  # the source was stopped
    assert client.text == b"data: 1\n\n"


async def test_a_failed_write_is_a_disconnect() -> None:
    gone, on_disconnect = counter()
    client = Client()

    async def broken_send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            raise OSError("connection reset")
        client.sent.append(message)

    async def body() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"

    response = SSEResponse(Pump(body()), None, on_disconnect)
    await asyncio.wait_for(response({"type": "http"}, client.receive, broken_send), TIMEOUT_S)
    assert gone == [1]


async def test_observed_counts_a_raising_stream_as_a_500_not_cancelled() -> None:
    metrics = Metrics()

    async def events() -> AsyncIterator[ChoiceEvent]:
        yield ChoiceEvent(0, [])
        raise RuntimeError("boom")

    resp = StartedResponse(
        "chatcmpl-x", ServedModel(ModelCard("m")), "m", 0, 1, Usage(), Pulled(Pump(events()))
    )
    stream = observed(resp, metrics, "chat", True, 0.0)
    with pytest.raises(RuntimeError):
        async for _ in stream:
            pass
    assert metrics.requests.labels("m", "chat", "true", "500")._value.get() == 1
    assert metrics.requests.labels("m", "chat", "true", "cancelled")._value.get() == 0


class Ready:
    """A source whose first items are ready when it is subscribed (a
    response's opening and its first event, which came before the response
    began), put in that very call; the rest come from a generator, pumped."""

    def __init__(self, first: list[bytes], rest: AsyncIterator[bytes]) -> None:
        self.first, self.rest = first, Pump(rest)

    def subscribe(self, sink: Any) -> None:
        for data in self.first:
            sink.put(data)
        self.rest.subscribe(sink)

    def resume(self) -> None:
        self.rest.resume()

    def stop(self) -> None:
        self.rest.stop()


async def test_the_ready_first_events_leave_from_the_calling_task() -> None:
    """No task (no turn of the event loop) stands between the response and
    its first writes: the first token waits for nothing."""
    client = Client()
    more = asyncio.Event()
    writers: list[asyncio.Task[Any] | None] = []

    async def send(message: dict[str, Any]) -> None:
        writers.append(asyncio.current_task())
        client.sent.append(message)

    async def rest() -> AsyncIterator[bytes]:
        await more.wait()
        yield b"data: second\n\n"

    async def call() -> None:
        response = SSEResponse(Ready([b"data: role\n\n", b"data: first\n\n"], rest()), None)
        await asyncio.wait_for(response({"type": "http"}, client.receive, send), TIMEOUT_S)

    task = asyncio.create_task(call())
    while not client.bodies:
        await asyncio.sleep(0)
    assert [m["body"] for m in client.bodies] == [b"data: role\n\n", b"data: first\n\n"]
    more.set()
    await task
    assert client.text == b"data: role\n\ndata: first\n\ndata: second\n\n"
    assert client.bodies[-1]["more_body"] is False
    start, role, first, second, end = writers
    assert start is role is first  # headers and the ready events: the same task
    assert second is not first  # a later event: written from the source's own turn (the pump's)
    assert end is first  # the end: the response's task, through every layer


async def test_shutdown_ends_an_open_stream_with_its_tail_and_closes_the_body() -> None:
    gone, on_disconnect = counter()
    client = Client()
    streams = OpenStreams()
    closed = asyncio.Event()

    async def endless() -> AsyncIterator[bytes]:
        try:
            yield b"data: 1\n\n"
            await asyncio.sleep(TIMEOUT_S * 2)
            yield b"data: never\n\n"
        finally:
            closed.set()

    async def stop_when_open() -> None:
        while not client.bodies:
            await asyncio.sleep(0)
        assert streams.count == 1
        streams.end_all(0)

    response = SSEResponse(
        Pump(endless()), None, on_disconnect, None, streams, lambda: b"data: bye\n\n"
    )
    await asyncio.gather(serve(response, client), stop_when_open())
    assert client.text == b"data: 1\n\ndata: bye\n\n"
    assert client.bodies[-1]["more_body"] is False
    assert streams.count == 0
    await asyncio.wait_for(closed.wait(), TIMEOUT_S)  # the source was stopped
    assert gone == []  # the server ended it: not a client that left


async def test_middle_writes_go_to_the_servers_send_and_the_ends_through_the_layers() -> None:
    """With the server's own send in the scope (api/app.py puts it there), a
    stream's writes skip the middleware layers; its start and its end (the
    last write) still pass through every layer."""
    client = Client()
    through: list[dict[str, Any]] = []

    async def layered(message: dict[str, Any]) -> None:  # what the middleware chain would be
        through.append(message)
        await client.send(message)

    loop = asyncio.get_running_loop()

    async def body() -> AsyncIterator[bytes]:
        for i in range(3):
            fut = loop.create_future()
            loop.call_soon(fut.set_result, None)
            await fut  # one write per event
            yield f"data: {i}\n\n".encode()

    scope = {"type": "http", SERVER_SEND: client.send}
    await asyncio.wait_for(SSEResponse(Pump(body()))(scope, client.receive, layered), TIMEOUT_S)
    assert client.text == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert [m["type"] for m in through] == ["http.response.start", "http.response.body"]
    assert through[-1]["more_body"] is False
    direct = [m for m in client.bodies if m not in through]
    assert [m["body"] for m in direct] == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n"]


class Pushing:
    """A source that puts `opening` when subscribed; `on_resume` runs inside
    `resume`, as a remote stream's held outputs and end are handed on right
    there."""

    def __init__(self, opening: list[bytes], on_resume: Callable[[Any], None] | None = None):
        self.opening, self.on_resume = opening, on_resume
        self.sink: Any = None
        self.stops = 0

    def subscribe(self, sink: Any) -> None:
        self.sink = sink
        for data in self.opening:
            sink.put(data)

    def resume(self) -> None:
        if self.on_resume is not None:
            self.on_resume(self.sink)

    def stop(self) -> None:
        self.stops += 1


def ends(sink: Any) -> None:
    sink.put(b"END")
    sink.end(None)


async def test_a_pushed_end_handed_on_inside_resume_is_sent() -> None:
    """A slow client parks the second write; once it caught up the source is
    resumed, and it ends right inside `resume`: the end still goes out."""
    client = Client()
    full = asyncio.Event()
    plain_send = client.send

    async def send(message: dict[str, Any]) -> None:
        if len(client.sent) == 2:  # the second body write: the socket is full a while
            await full.wait()
        await plain_send(message)

    client.send = send  # type: ignore[method-assign]
    source = Pushing([b"a", b"b"], on_resume=ends)
    finished: list[bool] = []
    task = asyncio.ensure_future(serve(SSEResponse(source, {}, finished=finished.append), client))
    for _ in range(100):
        await asyncio.sleep(0)
        if len(client.sent) == 2:
            break
    full.set()
    await task  # (within serve's timeout: before, the end waited for a client that never left)
    assert client.text == b"abEND" and client.bodies[-1]["more_body"] is False
    assert finished == [True]


async def test_a_pushed_stream_the_server_ends_counts_as_cut_short() -> None:
    client = Client()
    streams = OpenStreams()
    source = Pushing([b"a"])
    finished: list[bool] = []
    response = SSEResponse(
        source, {}, streams=streams, shutdown=lambda: b"BYE", finished=finished.append
    )
    task = asyncio.ensure_future(serve(response, client))
    for _ in range(100):
        await asyncio.sleep(0)
        if client.bodies:
            break
    streams.end_all(0)
    await task
    assert client.text == b"aBYE" and client.bodies[-1]["more_body"] is False
    assert source.stops >= 1
    assert finished == [False]  # a stream the server ended: not a "200"
