"""The HTTP servers a command runs: `http_server` (uvicorn for rotor's app,
which ends the open streams when the SIGTERM grace is over and says where it
listens once the port is bound) and `EmbeddedServer` (a small server inside
another asyncio program, a worker's `--system-port`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import uvicorn

from rotor import logs
from rotor.config import HTTPConfig


def http_server(app: Any, http: HTTPConfig, log_level: str, announce: str = "") -> uvicorn.Server:
    """uvicorn for `app`. `announce` (with `{url}`) is said (`logs.say`) once
    the port is really bound, naming the port the socket got."""
    config = uvicorn.Config(
        app,
        host=http.host,
        port=http.port,
        **logs.uvicorn_options(log_level),
        # Streams are ended by rotor at the grace's end; uvicorn waits a little longer.
        timeout_graceful_shutdown=http.shutdown_grace + 5,
    )
    return _Server(config, app.state.streams, http.shutdown_grace, announce)


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, streams: Any, grace: float, announce: str) -> None:
        super().__init__(config)
        self._streams = streams
        self._grace = grace
        self._announce = announce

    async def startup(self, sockets: list | None = None) -> None:
        await super().startup(sockets)
        if self._announce and self.started and self.servers:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            url = f"http://{host}:{port}/v1"
            logs.say(self._announce.format(url=url), url=url)

    async def shutdown(self, sockets: list | None = None) -> None:
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self._grace, self._streams.end_all, self._grace)
        try:
            await super().shutdown(sockets)
        finally:
            timer.cancel()


class EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling, which belongs to the program
    it runs in."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the host program handles signals
        yield

    def install_signal_handlers(self) -> None:  # older uvicorn
        return None
