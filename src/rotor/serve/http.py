"""The HTTP servers a command runs: `http_server` (uvicorn for rotor's app,
which ends the open streams when the SIGTERM grace is over, starts the app's
KServe gRPC server (`--grpc-port`) once HTTP listens, and says where it
listens once the ports are bound) and `EmbeddedServer` (a small server
inside another asyncio program, a worker's `--system-port`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import sys
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn
from fastapi import FastAPI
from starlette.datastructures import State

from rotor import logs
from rotor.config import HTTPConfig

if TYPE_CHECKING:
    from rotor.api.kserve.server import KServeServer


def http_server(
    app: FastAPI, http: HTTPConfig, log_level: str, announce: str = ""
) -> uvicorn.Server:
    """uvicorn for `app`. `announce` (with `{url}`) is said (`logs.say`) once
    the port is really bound, naming the port the socket got."""
    config = uvicorn.Config(
        app,
        host=http.host,
        port=http.port,
        **logs.uvicorn_options(log_level),
        # Streams are ended by rotor at the grace's end; uvicorn waits a little longer
        # (whole seconds: its setting is an int).
        timeout_graceful_shutdown=math.ceil(http.shutdown_grace + 5),
    )
    return _Server(config, app.state, http.shutdown_grace, announce)


class _Server(uvicorn.Server):
    """uvicorn, which also tells the app's startup to stop when it is told
    to leave (`app.state.leaving`), and says where it serves."""

    def __init__(self, config: uvicorn.Config, state: State, grace: float, announce: str) -> None:
        super().__init__(config)
        self._streams = state.streams
        self._leaving = state.leaving
        # --grpc-port (api/kserve/server.py)
        self._kserve: KServeServer | None = getattr(state, "kserve", None)
        self._grace = grace
        self._announce = announce
        self._loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None:  # a signal handler: wake the loop to tell the app
            self._loop.call_soon_threadsafe(self._leaving.set)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit:  # told to stop while starting: it never served
            return
        if self._kserve is not None:
            await self._start_kserve(self._kserve)
        if self._announce and self.started and self.servers:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            url = f"http://{host}:{port}/v1"
            logs.say(self._announce.format(url=url), url=url)

    async def _start_kserve(self, kserve: KServeServer) -> None:
        """The gRPC server; a port it cannot take ends startup as uvicorn's own does."""
        problem = await kserve.start()
        if problem is not None:
            logs.say(problem, logging.ERROR)
            for server in self.servers:
                server.close()
            await self.lifespan.shutdown()
            sys.exit(1)
        if not kserve.options.shared:  # --http-workers: the parent says where
            from rotor.api.kserve import announce_line

            assert kserve.port is not None  # started: it has its port
            line = announce_line(kserve.options.host, kserve.port)
            logs.say(line, grpc=line.rpartition(" ")[2])

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
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
