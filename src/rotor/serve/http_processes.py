"""`rotor run --http-workers N`: HTTP on N processes, the engine in one.

Why this split: the engine holds state every request shares (the scheduler,
the KV cache, the step loop), so it stays whole in one process; everything
per request that costs CPU (parsing, templates, detokenization, parsers, SSE)
is in the HTTP processes, which share nothing. They reach the engine through
`SocketEngine` over a unix socket, so the frontend code is the same as in one
process.

The parent process binds every socket first (a port in use is an error
before anything starts), forks the HTTP processes (serve/processes.py: one
SO_REUSEPORT socket each, tied to the parent), then runs the engine and its
socket server. It stops them all when it is told to stop or when one of them
dies.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile

from rotor import event_loop, logs
from rotor.config import HTTPConfig
from rotor.frontend import ModelEntry
from rotor.runtime.socket.client import SocketEngine
from rotor.runtime.socket.server import serve_engine
from rotor.serve.gc import settle
from rotor.serve.kserve import hold_shared_port, say_shared_port
from rotor.serve.processes import (
    ProcessError,
    fork_each,
    listen_all,
    stop_all,
    stop_signals,
    stop_timeout,
    watch,
)
from rotor.serve.request_log import for_process
from rotor.serve.system import System


def serve_http_processes(system: System, http: HTTPConfig, log_level: str) -> int:
    """Serve `system` with `http.http_workers` HTTP processes; returns the exit status."""
    entries = system.frontend.registry.entries()
    if len(entries) != 1 or len(system.engines) != 1:
        raise ProcessError("--http-workers serves one model with one engine")
    tmp = tempfile.mkdtemp(prefix="rotor-engine-")
    path = os.path.join(tmp, "engine.sock")
    engine_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    engine_sock.bind(path)
    engine_sock.listen(64)
    try:
        http, held = hold_shared_port(http)  # --grpc-port: one port for all
        http_socks = listen_all(http.host, http.port, http.http_workers)
    except ProcessError:
        engine_sock.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    def serve(sock: socket.socket) -> int:
        engine_sock.close()
        if held is not None:
            held.close()  # the parent's to hold
        own = for_process(http, http_socks.index(sock))  # its own request-log file
        return _http_process(entries[0], system, path, sock, own, log_level)

    port = http_socks[0].getsockname()[1]
    pids = fork_each(http_socks, serve)
    say_shared_port(http)
    url = f"http://{http.host}:{port}/v1"
    logs.say(f"serving {entries[0].model.name!r} on {url} with {len(pids)} HTTP processes", url=url)
    try:
        timeout = stop_timeout(http.shutdown_grace)
        return event_loop.run(_engine_process(system, engine_sock, pids, timeout))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _http_process(
    entry: ModelEntry,
    parent: System,
    path: str,
    sock: socket.socket,
    http: HTTPConfig,
    log_level: str,
) -> int:
    from rotor.pipeline.preparer import Preparer
    from rotor.serve.http import http_server

    # the registry's engine is the parent's one engine (the registry types it as a client)
    engine = SocketEngine(parent.engines[0].card, path, dict(parent.adapters))
    system = System.local(
        engine,
        entry.model,
        reasoning_field=parent.frontend.reasoning_field,
        # threads of this process's own (threads do not survive fork), with the parent's budget
        preparer=Preparer(budget_s=parent.frontend.preparer.budget_s),
    )
    app = system.app(http)
    # the same server as one process's: --shutdown-grace ends its open streams
    server = http_server(app, http, log_level)
    server.run(sockets=[sock])
    return 0 if server.started else 1


async def _engine_process(
    system: System, engine_sock: socket.socket, pids: list[int], timeout: float
) -> int:
    stop = asyncio.Event()
    stop_signals(stop)
    await system.start()
    server = await serve_engine(system.engines[0], engine_sock)
    settle()
    alive = set(pids)
    status = 0
    try:
        status = await watch(alive, stop)
    finally:
        await stop_all(alive, timeout)
        server.close()
        await system.stop()
    return status
