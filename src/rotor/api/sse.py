"""Server-sent events with disconnect detection.

The response watches the connection while it streams: when the client goes
away the stream is cancelled at once (which closes the pipeline and aborts the
engine's work), not at the next write.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.responses import Response

from rotor.api.errors import error_body

DONE = b"data: [DONE]\n\n"


def sse_event(data: Any) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def sse_error(status: int, message: str, param: str | None = None) -> bytes:
    return sse_event(error_body(status, message, param))


class SSEResponse(Response):
    """An ASGI response streaming `body` (already-encoded events)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        body: AsyncIterator[bytes],
        headers: dict[str, str] | None = None,
        on_disconnect: Callable[[], None] | None = None,
    ) -> None:
        self.body = body
        self.extra_headers = headers or {}
        self.on_disconnect = on_disconnect
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ] + [(k.lower().encode(), v.encode()) for k, v in self.extra_headers.items()]
        await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
        pump = asyncio.ensure_future(self._pump(send))
        watch = asyncio.ensure_future(wait_disconnect(receive))
        try:
            done, _ = await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pump, watch):
                if not task.done():
                    task.cancel()
            await asyncio.gather(pump, watch, return_exceptions=True)
        client_left = pump not in done or pump.exception() is not None
        if client_left and self.on_disconnect is not None:
            self.on_disconnect()

    async def _pump(self, send: Callable) -> None:
        body = self.body
        try:
            async for chunk in body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()


async def wait_disconnect(receive: Callable) -> None:
    """Returns when the client has gone away (after the body has been read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
