"""The streamed response: an ASGI response that writes a stream's SSE bytes
as they come, watching the connection and the server's shutdown.

Two ways to get the bytes. Pulled: the response reads its body (an async
generator of bytes) and writes every chunk ready at once in one write
(`Coalescer`). Pushed: a `PushSource` writes through the response's
`Writer` itself, from the engine's turn of the event loop (api/streamed.py);
the response's own task only waits — for the last bytes, for a write that
could not finish at once (a slow client: the source is held until it has,
then resumed), for the client to leave, or for the shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

from starlette.responses import Response

from rotor.api.coalesce import FIRST_PARTS, MAX_PARTS, Coalescer, finish_step
from rotor.api.drain import OpenStreams
from rotor.api.sse import SERVER_SEND, Keepalive, race_disconnect, wait_disconnect

log = logging.getLogger("rotor.api")


class Writer(Protocol):
    """What a pushing source writes through (the response, while it streams)."""

    def write(self, data: bytes) -> bool:
        """`data` now, or as soon as the write before it is done. False: it
        could not go at once (the client reads slowly): hold what makes more
        until `PushSource.resume`."""
        ...

    def close(self, data: bytes) -> None:
        """The stream's last bytes."""
        ...

    def fail(self) -> None:
        """The stream broke (a bug): its failure bytes are the last."""
        ...


class PushSource(Protocol):
    def start(self, writer: Writer) -> bool:
        """Begin writing through `writer`; False (nothing written) when this
        response cannot push: then its body is pulled."""
        ...

    def resume(self) -> None: ...

    def stop(self) -> None:
        """The client left, or the server stops: nothing more is written."""
        ...

    def finish(self, complete: bool) -> None:
        """The response is over: its last bytes went (`complete`), or not."""
        ...


class SSEResponse(Response):
    """An ASGI response streaming `body` (already-encoded events), or, when
    `pushed` can, the bytes it pushes.

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
        pushed: PushSource | None = None,
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
        self.pushed = pushed
        # Pushed: the server's send, a write that suspended (its coroutine
        # and what it waits on), bytes waiting behind it, the last bytes, a
        # write that failed, and what wakes the response's task for them.
        self._server_send: Callable[..., Any] | None = None
        self._parked: tuple[Any, Any] | None = None
        self._waiting: list[bytes] = []
        self._last: bytes | None = None
        self._broken = False
        self._held = False  # a write said False: resume the source once caught up
        self._cut_short = False  # the server stopped it before the source's end
        self._signal: asyncio.Event | None = None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ] + [(k.lower().encode(), v.encode()) for k, v in self.extra_headers.items()]
        batches = Coalescer(self.body)
        streams = self.streams
        server_send = self._server_send = scope.get(SERVER_SEND, send)
        stop = streams.stopping if streams is not None else None
        if streams is not None:
            streams.count += 1
        pump: asyncio.Future[None] | None = None
        ticker: asyncio.Task[None] | None = None
        pushing = False
        try:
            await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
            self._signal = asyncio.Event()
            pushing = self.pushed is not None and self.pushed.start(self)
            if pushing:
                if self.keepalive is not None:
                    ticker = asyncio.ensure_future(self._keep_alive(server_send, *self.keepalive))
                await self._push(send, receive, stop)
            # The response began on its first engine event, so the first batch
            # is ready: it goes out before any task exists (each would cost the
            # first token a turn of the event loop).
            elif await self._write_batch(batches, send, server_send, FIRST_PARTS):
                if self.keepalive is not None:
                    ticker = asyncio.ensure_future(self._keep_alive(server_send, *self.keepalive))
                # The rest, while watching the connection and the shutdown
                # signal: whichever comes first cancels the pump (closing the
                # body stops the engine's work).
                pump = await race_disconnect(self._pump(batches, send, server_send), receive, stop)
                if pump is None and stop is not None and stop.is_set():
                    await self._shutdown_tail(send)
        except Exception:  # a write failed: the client is gone
            pump = None
        finally:
            if ticker is not None:
                ticker.cancel()
            if streams is not None:
                streams.count -= 1
            if pushing:
                if not self.complete:
                    self.pushed.stop()  # type: ignore[union-attr]
                self.pushed.finish(self.complete and not self._cut_short)  # type: ignore[union-attr]
            # what ties the response to the server's request cycle and to its
            # source goes now: no cycle is left for the collector
            self._server_send = self._parked = self.pushed = None
            await batches.aclose()
            await self.body.aclose()
        # The pump raises only when a write failed: the client is gone. A
        # client that closes once the whole stream was sent did not leave early.
        client_left = not self.complete and (pump is None or pump.exception() is not None)
        if client_left and self.on_disconnect is not None:
            self.on_disconnect()

    async def _shutdown_tail(self, send: Callable) -> None:
        tail = self.shutdown() if self.shutdown is not None else b""
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        self.complete = True

    # -- pulled --------------------------------------------------------------------------

    async def _pump(self, batches: Coalescer, send: Callable, server_send: Callable) -> None:
        while await self._write_batch(batches, send, server_send):
            pass

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

    # -- pushed (the Writer a PushSource writes through) -----------------------------------------

    def write(self, data: bytes) -> bool:
        self._wrote = True
        if self._writing or self._parked is not None or self._last is not None or self._broken:
            self._waiting.append(data)
            self._held = True
            return False
        coro = self._server_send({"type": "http.response.body", "body": data, "more_body": True})  # type: ignore[misc]
        try:
            waiting_on = coro.send(None)  # the write, stepped by hand: done at once, mostly
        except StopIteration:
            return True
        except Exception:  # the client is gone
            self._broken = True
            self._signal.set()  # type: ignore[union-attr]
            return False
        self._parked = (coro, waiting_on)  # the socket is full: the response's task finishes it
        self._held = True
        self._signal.set()  # type: ignore[union-attr]
        return False

    def close(self, data: bytes) -> None:
        if self._last is None:
            self._last = data
            self._signal.set()  # type: ignore[union-attr]

    def fail(self) -> None:
        rid = self.extra_headers.get("x-request-id")
        log.error("the pushed stream of request %s failed", rid)
        self.close(self._failure_bytes())

    async def _push(self, send: Callable, receive: Callable, stop: asyncio.Event | None) -> None:
        """While the source pushes: finish a write that waited on the client
        (then write what queued behind it and let the source go on), send the
        last bytes through `send`, or stop at once when the client leaves or
        the server stops. Raises when a write failed (the client is gone)."""
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
                    raise ConnectionError("a pushed write failed: the client is gone")
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
                    return
                if self._waiting:
                    data = b"".join(self._waiting)
                    self._waiting = []
                    await self._write_now(data)
                    continue
                if self._held:  # caught up: the source may make more
                    self._held = False
                    self.pushed.resume()  # type: ignore[union-attr]
                woken = asyncio.ensure_future(signal.wait())
                waits = {woken, watch} if stopping is None else {woken, watch, stopping}
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if not woken.done():
                    woken.cancel()
                if watch in done:  # the client left: the finally stops the source
                    return
                if stopping is not None and stopping in done:
                    self._cut_short = True  # counted as a pulled stream the server ended
                    self.pushed.stop()  # type: ignore[union-attr]
                    await self._shutdown_tail(send)
                    return
        finally:
            watch.cancel()
            if stopping is not None:
                stopping.cancel()

    async def _write_now(self, data: bytes) -> None:
        """A write from the response's own task (what queued behind a slow one)."""
        self._writing = True
        try:
            await self._server_send({"type": "http.response.body", "body": data, "more_body": True})  # type: ignore[misc]
        finally:
            self._writing = False

    # -- both ------------------------------------------------------------------------------------

    async def _keep_alive(self, server_send: Callable, interval: float, data: bytes) -> None:
        """`data` whenever `interval` passes with no write (none under way)."""
        message = {"type": "http.response.body", "body": data, "more_body": True}
        while True:
            await asyncio.sleep(interval)
            if not self._wrote and not self._writing and not self.complete and not self._parked:
                self._writing = True
                try:
                    await server_send(dict(message))
                except Exception:  # the client is gone: the stream's own write says so
                    return
                finally:
                    self._writing = False
                    if self._waiting and self._signal is not None:
                        self._signal.set()  # pushed bytes came meanwhile: the response writes them
            self._wrote = False

    def _failure_bytes(self) -> bytes:
        if self.failure is None:
            return b""
        try:
            return self.failure()
        except Exception:
            log.exception("the failure event of a broken stream could not be built")
            return b""
