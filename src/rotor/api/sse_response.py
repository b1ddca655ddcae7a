"""The streamed response: an ASGI response that writes a stream's SSE bytes
as they come, watching the connection and the server's shutdown.

It is the sink of a source of bytes (api/streamed.py's `ShapedStream`): the
source puts each event's bytes from the engine's turn of the event loop, and
the response writes them to the socket there and then. Its own task only
waits: for the last bytes, for a write that could not finish at once (a slow
client: the source is held until it has, then resumed; what the source puts
meanwhile joins one write), for the client to leave, or for the shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from starlette.responses import Response

from rotor.api.drain import OpenStreams
from rotor.api.sse import SERVER_SEND, Keepalive, finish_step, wait_disconnect
from rotor.protocol.flow import Source

log = logging.getLogger("rotor.api")


class SSEResponse(Response):
    """An ASGI response streaming the bytes `source` puts (already-encoded
    events), a Sink of bytes (protocol/flow.py).

    `finished(complete)` is called once the response is over: its last bytes
    went (`complete`), or not. `on_disconnect` is called when the client went
    away mid-stream. A source that ends with an error (a bug: the framings
    turn pipeline failures into events) is logged and the stream still ends
    cleanly, with `failure()` as its last bytes when given. With `streams`,
    the stream is one of the app's open streams: when they are ended
    (shutdown), it stops and sends `shutdown()` as its last bytes. With
    `keepalive` (seconds, bytes), a stream that wrote nothing for that long
    writes those bytes: a timer of the response's own."""

    media_type = "text/event-stream"

    def __init__(
        self,
        source: Source[bytes],
        headers: dict[str, str] | None = None,
        on_disconnect: Callable[[], None] | None = None,
        failure: Callable[[], bytes] | None = None,
        streams: OpenStreams | None = None,
        shutdown: Callable[[], bytes] | None = None,
        keepalive: Keepalive | None = None,
        finished: Callable[[bool], None] | None = None,
    ) -> None:
        self.source: Source[bytes] | None = source
        self.keepalive = keepalive
        self._wrote = False  # since the keepalive's last look
        self._writing = False  # a write is under way (perhaps waiting for the client)
        self.streams = streams
        self.shutdown = shutdown
        self.extra_headers = headers or {}
        self.on_disconnect = on_disconnect
        self.failure = failure
        self.finished = finished
        self.status_code = 200
        self.background = None
        self.complete = False  # the last bytes were sent
        # The server's send, a write that suspended (its coroutine and what
        # it waits on), bytes waiting behind it, the last bytes, a write that
        # failed, and what wakes the response's task for them.
        self._server_send: Callable[..., Any] | None = None
        self._parked: tuple[Any, Any] | None = None
        self._waiting: list[bytes] = []
        self._last: bytes | None = None
        self._broken = False
        self._held = False  # a put said False: resume the source once caught up
        self._cut_short = False  # the server stopped it before the source's end
        self._signal: asyncio.Event | None = None

    async def __call__(
        self, scope: Any, receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ] + [(k.lower().encode(), v.encode()) for k, v in self.extra_headers.items()]
        streams = self.streams
        self._server_send = scope.get(SERVER_SEND, send)
        stop = streams.stopping if streams is not None else None
        if streams is not None:
            streams.count += 1
        source = self.source
        assert source is not None
        ticker: asyncio.Future[None] | None = None
        client_left = False
        try:
            await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
            self._signal = asyncio.Event()
            source.subscribe(self)
            if self.keepalive is not None:
                ticker = asyncio.ensure_future(self._keep_alive(*self.keepalive))
            client_left = not await self._run(send, receive, stop)
        except Exception:  # a write failed: the client is gone
            client_left = True
        finally:
            if ticker is not None:
                ticker.cancel()
            if streams is not None:
                streams.count -= 1
            if not self.complete:
                source.stop()
            if self.finished is not None:
                self.finished(self.complete and not self._cut_short)
            # what ties the response to the server's request cycle and to its
            # source goes now: no cycle is left for the collector
            self._server_send = self._parked = self.source = None
        # A client that closes once the whole stream was sent did not leave early.
        if client_left and not self.complete and self.on_disconnect is not None:
            self.on_disconnect()

    async def _shutdown_tail(self, send: Callable[..., Any]) -> None:
        tail = self.shutdown() if self.shutdown is not None else b""
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        self.complete = True

    # -- Sink[bytes] ---------------------------------------------------------------------

    def put(self, item: bytes) -> bool:
        """`item` now, or as soon as the write before it is done. False: it
        could not go at once (the client reads slowly): the source holds
        until it is resumed."""
        self._wrote = True
        if self._writing or self._parked is not None or self._last is not None or self._broken:
            self._waiting.append(item)
            self._held = True
            return False
        server_send = self._server_send
        assert server_send is not None
        coro = server_send({"type": "http.response.body", "body": item, "more_body": True})
        try:
            waiting_on = coro.send(None)  # the write, stepped by hand: done at once, mostly
        except StopIteration:
            return True
        except Exception:  # the client is gone
            self._broken = True
            self._wake()
            return False
        self._parked = (coro, waiting_on)  # the socket is full: the response's task finishes it
        self._held = True
        self._wake()
        return False

    def end(self, error: Exception | None) -> None:
        """The source is over: what it put is all (`error`: a bug, which ends
        the stream with the failure bytes)."""
        if error is not None:
            rid = self.extra_headers.get("x-request-id")
            log.error(
                "the stream of request %s failed",
                rid,
                exc_info=(type(error), error, error.__traceback__),
            )
        if self._last is None:
            self._last = self._failure_bytes() if error is not None else b""
            self._wake()

    # -- the response's own task ---------------------------------------------------------

    def _wake(self) -> None:
        signal = self._signal
        if signal is not None:
            signal.set()

    async def _run(
        self, send: Callable[..., Any], receive: Callable[..., Any], stop: asyncio.Event | None
    ) -> bool:
        """While the source puts: finish a write that waited on the client
        (then write what queued behind it and let the source go on), send the
        last bytes through `send`, or stop at once when the client leaves or
        the server stops. False: the client left. Raises when a write failed
        (the client is gone)."""
        signal = self._signal
        assert signal is not None
        watch = asyncio.ensure_future(wait_disconnect(receive))
        stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
        try:
            while True:
                # cleared before the state is read: what the source does from
                # here on (even inside `resume` below) wakes the wait again
                signal.clear()
                if self._broken:
                    raise ConnectionError("a write failed: the client is gone")
                parked, self._parked = self._parked, None
                if parked is not None:
                    self._writing = True
                    try:
                        await finish_step(*parked)
                    finally:
                        self._writing = False
                if self._last is not None:
                    data = b"".join(self._waiting) + self._last
                    self._waiting = []
                    await send({"type": "http.response.body", "body": data, "more_body": False})
                    self.complete = True
                    return True
                if self._waiting:
                    data = b"".join(self._waiting)
                    self._waiting = []
                    await self._write_now(data)
                    continue
                if self._held and self.source is not None:  # caught up: the source may go on
                    self._held = False
                    self.source.resume()
                woken = asyncio.ensure_future(signal.wait())
                waits = {woken, watch} if stopping is None else {woken, watch, stopping}
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if not woken.done():
                    woken.cancel()
                if watch in done and self._last is None:  # the client left mid-stream
                    return False  # (the caller stops the source)
                if stopping is not None and stopping in done:
                    self._cut_short = True  # counted as a stream the server ended
                    if self.source is not None:
                        self.source.stop()
                    await self._shutdown_tail(send)
                    return True
        finally:
            watch.cancel()
            if stopping is not None:
                stopping.cancel()

    async def _write_now(self, data: bytes) -> None:
        """A write from the response's own task (what queued behind a slow one)."""
        server_send = self._server_send
        assert server_send is not None
        self._writing = True
        try:
            await server_send({"type": "http.response.body", "body": data, "more_body": True})
        finally:
            self._writing = False

    async def _keep_alive(self, interval: float, data: bytes) -> None:
        """`data` whenever `interval` passes with no write (none under way)."""
        message = {"type": "http.response.body", "body": data, "more_body": True}
        while True:
            await asyncio.sleep(interval)
            server_send = self._server_send
            if server_send is None:
                return
            if not self._wrote and not self._writing and not self.complete and not self._parked:
                self._writing = True
                try:
                    await server_send(dict(message))
                except Exception:  # the client is gone: the stream's own write says so
                    return
                finally:
                    self._writing = False
                    if self._waiting and self._signal is not None:
                        self._signal.set()  # bytes came meanwhile: the response writes them
            self._wrote = False

    def _failure_bytes(self) -> bytes:
        if self.failure is None:
            return b""
        try:
            return self.failure()
        except Exception:
            log.exception("the failure event of a broken stream could not be built")
            return b""
