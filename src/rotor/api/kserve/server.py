"""The gRPC server of one serving process: grpc.aio on the loop uvicorn
runs, over the app's Responder. It starts once the app has started and
HTTP listens (`start`, called by serve/http.py, which says where it
listens), stops taking new calls as soon as the server is told to leave
(SIGTERM), and is stopped, its calls finished, before the app's own
shutdown hooks stop the engines (`stop`). Open streams end when the
shutdown grace is over, as HTTP's do; a unary call still running
`STOP_EXTRA_S` later is cancelled, as uvicorn cancels an HTTP one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import grpc

from rotor.api.kserve import KServeOptions, target
from rotor.api.kserve.kserve_pb2_grpc import add_GRPCInferenceServiceServicer_to_server
from rotor.api.kserve.service import KServeService
from rotor.api.respond import Responder

STOP_EXTRA_S = 5.0  # as uvicorn's timeout_graceful_shutdown (serve/http.py)


class KServeServer:
    def __init__(
        self,
        responder: Responder,
        options: KServeOptions,
        api_key: str | Sequence[str] | None,
        leaving: asyncio.Event,
        message_limit: int,
    ) -> None:
        self.options = options
        self._leaving = leaving
        self._service = KServeService(responder, api_key, leaving.is_set)
        self._limit = message_limit
        self._server: grpc.aio.Server | None = None
        self._stopping: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self.port: int | None = None

    async def start(self) -> str | None:
        """Listen and serve; the reason it cannot (the port is taken), else None."""
        options = self.options
        server = grpc.aio.server(
            options=[
                # one process's port is its own (a second rotor on it is an error);
                # --http-workers' processes share theirs
                ("grpc.so_reuseport", 1 if options.shared else 0),
                ("grpc.max_receive_message_length", self._limit),  # HTTP's body limit
                ("grpc.max_send_message_length", self._limit),
            ]
        )
        add_GRPCInferenceServiceServicer_to_server(self._service, server)
        address = target(options.host, options.port)
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as e:
            return f"cannot serve KServe gRPC on {address}: {e}"
        if not port:  # older grpcio says so with port 0
            return f"cannot serve KServe gRPC on {address}"
        await server.start()
        self._server = server
        self.port = port
        self._watch = asyncio.ensure_future(self._stop_when_leaving())
        return None

    async def stop(self) -> None:
        """Take no new calls, let the running ones finish (bounded), done."""
        if self._watch is not None:
            self._watch.cancel()
        self._begin_stop()
        if self._stopping is not None:
            await self._stopping

    async def _stop_when_leaving(self) -> None:
        await self._leaving.wait()
        self._begin_stop()

    def _begin_stop(self) -> None:
        if self._server is not None and self._stopping is None:
            grace = self.options.grace + STOP_EXTRA_S
            self._stopping = asyncio.ensure_future(self._server.stop(grace))
