"""Server-sent events: the two framings rotor's APIs use, and a response that
streams them with disconnect detection.

The response watches the connection while it streams: when the client goes
away the stream is cancelled at once (which closes the pipeline and aborts the
engine's work), not at the next write. Non-streaming routes race their work
against the same watch (`race_disconnect`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any, Protocol, TypeVar

import orjson
from starlette.responses import Response

from rotor.api.coalesce import FIRST_PARTS, MAX_PARTS, Coalescer
from rotor.api.drain import OpenStreams

log = logging.getLogger("rotor.api")

DONE = b"data: [DONE]\n\n"

# Where the app keeps the server's own `send` in the scope (api/app.py): a
# stream's middle writes go there directly. The middleware between (error
# handlers, body limits, the access log) look only at a response's start and
# its last write, and each layer cost every token a coroutine call.
SERVER_SEND = "rotor.server_send"

T = TypeVar("T")


def sse_event(data: Any) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def named_event(event: dict[str, Any]) -> bytes:
    """One named SSE event, as Anthropic and the Responses API send them."""
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


# Where a template's variable parts go: strings no event can otherwise hold
# (NUL cannot be in a header, a model name or an id).
HOLE = "\x00rotor-hole\x00"
NUMBER_HOLE = "\x00rotor-number\x00"


def template(framed: bytes, *holes: str) -> tuple[bytes, ...] | None:
    """The bytes of a framed event made with each of `holes` (default: HOLE)
    as a field's value, cut around them, in order: for a string hole,
    `orjson.dumps(value)` goes between two parts, for NUMBER_HOLE the
    number's digits, and the result is the very bytes the event with those
    values frames to (orjson writes a value the same wherever it stands).
    None when a hole is not there exactly once, in that order."""
    parts: list[bytes] = []
    rest = framed
    for hole in holes or (HOLE,):
        mark = orjson.dumps(hole)
        if framed.count(mark) != 1:
            return None
        before, found, rest = rest.partition(mark)
        if not found:  # out of order
            return None
        parts.append(before)
    parts.append(rest)
    return tuple(parts)


# A quiet stream's keepalive: after this many seconds with no write, these bytes.
Keepalive = tuple[float, bytes]


class Framing(Protocol):
    """How an API writes its events as SSE."""

    keepalive: Keepalive | None
    # What a stream ends with after its last event (OpenAI's `data: [DONE]`).
    trailer: bytes

    def frame(self, events: list[dict[str, Any]]) -> bytes:
        """`events`, each framed, joined (b"" for none)."""
        ...

    def tail(self, events: list[dict[str, Any]]) -> bytes:
        """`events` (an API's failure events) as the last bytes of a stream."""
        ...


class OpenAIFraming:
    """OpenAI's framing: `data: <chunk>` events, then `data: [DONE]`."""

    keepalive: Keepalive | None = None
    trailer = DONE

    def frame(self, events: list[dict[str, Any]]) -> bytes:
        if len(events) == 1:
            return b"data: " + orjson.dumps(events[0]) + b"\n\n"
        return b"".join([sse_event(e) for e in events])

    def tail(self, events: list[dict[str, Any]]) -> bytes:
        return self.frame(events) + DONE


OPENAI = OpenAIFraming()


class NamedFraming:
    """Named events (`event: <type>` + `data: <event>`), as Anthropic and the
    Responses API send them; `keepalive` (optional) is an event a quiet
    stream sends (Anthropic's pings)."""

    trailer = b""

    def __init__(self, keepalive: Keepalive | None = None) -> None:
        self.keepalive = keepalive

    def frame(self, events: list[dict[str, Any]]) -> bytes:
        return b"".join([named_event(e) for e in events])

    def tail(self, events: list[dict[str, Any]]) -> bytes:
        return self.frame(events)


NAMED = NamedFraming()


async def wait_disconnect(receive: Callable) -> None:
    """Returns when the client has gone away (after the body has been read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def race_disconnect(
    work: Coroutine[Any, Any, T], receive: Callable, stop: asyncio.Event | None = None
) -> asyncio.Future[T] | None:
    """Run `work` while watching the connection (and `stop`, when given). The
    finished work (its result or exception inside), or None when the client
    went away or `stop` was set first — the work is then cancelled, and done
    by the time this returns."""
    task = asyncio.ensure_future(work)
    waits: set[asyncio.Future[Any]] = {task, asyncio.ensure_future(wait_disconnect(receive))}
    if stop is not None:
        waits.add(asyncio.ensure_future(stop.wait()))
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in waits:
            if not t.done():
                t.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    return task if task in done else None


class SSEResponse(Response):
    """An ASGI response streaming `body` (already-encoded events).

    `on_disconnect` is called when the client went away mid-stream. A body
    that raises (a bug: the framings turn pipeline failures into events) is
    logged with its traceback and the stream still ends cleanly, with
    `failure()` as its last bytes when given. With `streams`, the stream is
    one of the app's open streams: when they are ended (shutdown), it stops
    and sends `shutdown()` as its last bytes. With `keepalive` (seconds,
    bytes), a stream that wrote nothing for that long writes those bytes: a
    timer of the response's own, so every event still passes straight from
    the body to the socket (a task between them would cost each a hand-off,
    and would hide what is ready from the coalescing of writes)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        body: AsyncGenerator[bytes, None],
        headers: dict[str, str] | None = None,
        on_disconnect: Callable[[], None] | None = None,
        failure: Callable[[], bytes] | None = None,
        streams: OpenStreams | None = None,
        shutdown: Callable[[], bytes] | None = None,
        keepalive: Keepalive | None = None,
    ) -> None:
        self.body = body
        self.keepalive = keepalive
        self._wrote = False  # since the keepalive's last look
        self._writing = False  # a write is under way (perhaps waiting for the client)
        self.streams = streams
        self.shutdown = shutdown
        self.extra_headers = headers or {}
        self.on_disconnect = on_disconnect
        self.failure = failure
        self.status_code = 200
        self.background = None
        self.complete = False  # the last bytes were sent

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ] + [(k.lower().encode(), v.encode()) for k, v in self.extra_headers.items()]
        batches = Coalescer(self.body)
        streams = self.streams
        server_send = scope.get(SERVER_SEND, send)
        if streams is not None:
            streams.count += 1
        pump: asyncio.Future[None] | None = None
        ticker: asyncio.Task[None] | None = None
        try:
            await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
            # The response began on its first engine event, so the first batch
            # is ready: it goes out before any task exists (each would cost the
            # first token a turn of the event loop).
            if await self._write_batch(batches, send, server_send, FIRST_PARTS):
                if self.keepalive is not None:
                    ticker = asyncio.ensure_future(self._keep_alive(server_send, *self.keepalive))
                # The rest, while watching the connection and the shutdown
                # signal: whichever comes first cancels the pump (closing the
                # body stops the engine's work).
                stop = streams.stopping if streams is not None else None
                pump = await race_disconnect(self._pump(batches, send, server_send), receive, stop)
                if pump is None and stop is not None and stop.is_set():
                    tail = self.shutdown() if self.shutdown is not None else b""
                    await send({"type": "http.response.body", "body": tail, "more_body": False})
                    self.complete = True
        except Exception:  # a write failed: the client is gone
            pump = None
        finally:
            if ticker is not None:
                ticker.cancel()
            if streams is not None:
                streams.count -= 1
            await batches.aclose()
            await self.body.aclose()
        # The pump raises only when a write failed: the client is gone. A
        # client that closes once the whole stream was sent did not leave early.
        client_left = not self.complete and (pump is None or pump.exception() is not None)
        if client_left and self.on_disconnect is not None:
            self.on_disconnect()

    async def _pump(self, batches: Coalescer, send: Callable, server_send: Callable) -> None:
        while await self._write_batch(batches, send, server_send):
            pass

    async def _keep_alive(self, server_send: Callable, interval: float, data: bytes) -> None:
        """`data` whenever `interval` passes with no write (none under way)."""
        message = {"type": "http.response.body", "body": data, "more_body": True}
        while True:
            await asyncio.sleep(interval)
            if not self._wrote and not self._writing and not self.complete:
                try:
                    await server_send(dict(message))
                except Exception:  # the client is gone: the stream's own write says so
                    return
            self._wrote = False

    async def _write_batch(
        self,
        batches: Coalescer,
        send: Callable,
        server_send: Callable,
        max_parts: int = MAX_PARTS,
    ) -> bool:
        """One write of every event ready now (`Coalescer`: the client reads the
        same bytes, in fewer socket writes); False once the body has ended.
        A body that raises (a bug) ends with the failure bytes, logged. The
        last write goes through `send` (every layer sees the end), the others
        straight to `server_send`."""
        try:
            chunk = await batches.pull(max_parts)
        except Exception:
            rid = self.extra_headers.get("x-request-id")
            log.exception("the stream of request %s failed", rid)
            chunk, last = self._failure_bytes(), True
        else:
            if chunk is None:
                chunk, last = b"", True
            else:
                last = batches.done  # the last bytes end the body in the same write
        self._wrote = self._writing = True
        try:
            if last:
                await send({"type": "http.response.body", "body": chunk, "more_body": False})
                self.complete = True
                return False
            await server_send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            self._writing = False
        return True

    def _failure_bytes(self) -> bytes:
        if self.failure is None:
            return b""
        try:
            return self.failure()
        except Exception:
            log.exception("the failure event of a broken stream could not be built")
            return b""
