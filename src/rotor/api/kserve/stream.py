"""One ModelStreamInfer call: the requests it carries are answered side by
side (as Triton does: a client tells its answers apart by request id), their
responses go out in the order they are ready, and the call ends once the
client has sent its last request and every answer is out.

It is one of the app's open streams: when the shutdown grace is over
(`OpenStreams.end_all`) it ends at once with UNAVAILABLE, as an HTTP stream
ends with its error event. A client that goes away cancels the call, and
with it every answer under way (their engine work stops)."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from rotor.api.drain import SHUTTING_DOWN, OpenStreams
from rotor.api.errors import APIError
from rotor.api.kserve import kserve_pb2 as pb
from rotor.api.kserve.answer import Put

Answer = Callable[[pb.ModelInferRequest, Put], Awaitable[None]]


class _Signal(enum.Enum):
    END = enum.auto()  # every request answered
    STOP = enum.auto()  # the grace is over


async def stream_responses(
    requests: AsyncIterator[pb.ModelInferRequest], answer: Answer, streams: OpenStreams
) -> AsyncGenerator[pb.ModelStreamInferResponse, None]:
    """The call's responses; APIError(503) when the server's grace ends it.
    `answer(request, put)` puts a request's responses and never raises."""
    out: asyncio.Queue[pb.ModelStreamInferResponse | _Signal] = asyncio.Queue()
    running: set[asyncio.Task[None]] = set()

    async def read() -> None:
        try:
            async for request in requests:
                task = asyncio.ensure_future(answer(request, out.put_nowait))
                running.add(task)
                task.add_done_callback(running.discard)
            while running:
                await asyncio.wait(set(running))
        finally:
            out.put_nowait(_Signal.END)

    async def watch() -> None:
        await streams.stopping.wait()
        out.put_nowait(_Signal.STOP)

    helpers = [asyncio.ensure_future(read()), asyncio.ensure_future(watch())]
    streams.count += 1
    try:
        while True:
            item = await out.get()
            if item is _Signal.END:
                return
            if item is _Signal.STOP:
                raise APIError(503, SHUTTING_DOWN)
            yield item
    finally:
        streams.count -= 1
        tasks = [*helpers, *running]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
