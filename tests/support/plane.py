"""rotor's own client side of the request plane, for tests that speak to a
worker directly (a prefill's answer, a decode request with a hand-over)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rotor.protocol.engine import EngineOutput, EngineRequest, pulled
from rotor.runtime.nats.connect import connect
from rotor.runtime.nats.request_plane import RequestPlane

from support.cluster import Nats


class Plane:
    """A RequestPlane on an event loop of its own, called from test code."""

    def __init__(self, loop: asyncio.AbstractEventLoop, plane: RequestPlane) -> None:
        self.loop = loop
        self.plane = plane

    def collect(
        self, worker: str, request: EngineRequest, timeout: float = 60
    ) -> list[EngineOutput]:
        """Every output of `request` on `worker` (EngineError when it fails)."""

        async def go() -> list[EngineOutput]:
            return [out async for out in pulled(self.plane.generate(worker, request, timeout))]

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(timeout + 30)


@contextmanager
def request_plane(nats: Nats) -> Iterator[Plane]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    nc = run(connect(nats.url, "test"))
    plane = RequestPlane(nc)
    run(plane.start())
    try:
        yield Plane(loop, plane)
    finally:
        run(plane.stop())
        run(nc.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
