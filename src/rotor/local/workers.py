"""`rotor run --http-workers N`: HTTP on N processes, the engine in one.

Why this split: the engine holds state every request shares (the scheduler,
the KV cache, the step loop), so it stays whole in one process; everything
per request that costs CPU (parsing, templates, detokenization, parsers, SSE)
is in the HTTP processes, which share nothing. They reach the engine through
`SocketEngine` over a unix socket, so the frontend code is the same as in one
process.

The parent process binds every socket first (a port in use is an error
before anything starts), forks the HTTP processes — each with its own
listening socket on the same port (SO_REUSEPORT: the kernel spreads
connections over them) — then runs the engine and its socket server. It
stops them all when it is told to stop or when one of them dies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile

from rotor import logs
from rotor.config import HTTPConfig
from rotor.frontend import ModelEntry
from rotor.local.client import SocketEngine
from rotor.local.server import serve_engine
from rotor.system import System

log = logging.getLogger("rotor.local")

STOP_TIMEOUT_S = 15.0


class WorkersError(Exception):
    """The HTTP workers cannot start (a port in use, a bad count); the message says why."""


def listen_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket that shares its port with the other workers'."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    # Accepted connections inherit it on Linux; the loops set it again anyway.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise WorkersError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve_workers(system: System, http: HTTPConfig, log_level: str) -> int:
    """Serve `system` with `http.http_workers` HTTP processes; returns the exit status."""
    entries = system.frontend.registry.entries()
    if len(entries) != 1 or len(system.engines) != 1:
        raise WorkersError("--http-workers serves one model with one engine")
    n = http.http_workers
    if n < 1:
        raise WorkersError(f"--http-workers must be at least 1, got {n}")
    tmp = tempfile.mkdtemp(prefix="rotor-engine-")
    path = os.path.join(tmp, "engine.sock")
    engine_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    engine_sock.bind(path)
    engine_sock.listen(64)
    try:
        http_socks = [listen_tcp(http.host, http.port) for _ in range(n)]
    except WorkersError:
        engine_sock.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    sys.stdout.flush()
    sys.stderr.flush()
    pids = []
    for i in range(n):
        pid = os.fork()
        if pid == 0:  # an HTTP process: never returns
            code = 1
            try:
                engine_sock.close()
                for j, s in enumerate(http_socks):
                    if j != i:
                        s.close()
                code = _http_process(entries[0], system, path, http_socks[i], http, log_level)
            except BaseException:
                log.exception("HTTP process %d failed", os.getpid())
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    for s in http_socks:
        s.close()
    url = f"http://{http.host}:{http.port}/v1"
    logs.say(f"serving {entries[0].model.name!r} on {url} with {n} HTTP processes", url=url)
    try:
        return asyncio.run(_engine_process(system, engine_sock, pids))
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
    import uvicorn

    from rotor.api.app import create_app
    from rotor.pipeline.workers import PreparePool

    engine = SocketEngine(entry.engine.card, path)
    system = System.local(engine, entry.model, reasoning_field=parent.frontend.reasoning_field)
    # A prepare pool of this process's own (threads do not survive fork), with the parent's budget.
    system.frontend.pool = PreparePool(budget_s=parent.frontend.pool.budget_s)
    app = create_app(
        system.frontend,
        api_key=http.api_key,
        on_startup=[system.start],
        on_shutdown=[system.stop],
        max_queued=http.max_queued_requests,
    )
    config = uvicorn.Config(
        app,
        timeout_graceful_shutdown=10,
        **logs.uvicorn_options(log_level),
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


async def _engine_process(system: System, engine_sock: socket.socket, pids: list[int]) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await system.start()
    server = await serve_engine(system.engines[0], engine_sock)
    status = 0
    alive = set(pids)
    try:
        while not stop.is_set():
            for pid in list(alive):
                done, code = os.waitpid(pid, os.WNOHANG)
                if done:
                    alive.discard(pid)
                    log.error("HTTP process %d exited (%d); stopping", pid, code)
                    status = 1
                    stop.set()
            try:
                await asyncio.wait_for(stop.wait(), 0.5)
            except asyncio.TimeoutError:
                pass
    finally:
        await _stop_processes(alive)
        server.close()
        await system.stop()
    return status


async def _stop_processes(pids: set[int]) -> None:
    """SIGTERM (uvicorn's graceful shutdown), then SIGKILL after STOP_TIMEOUT_S."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = asyncio.get_running_loop().time() + STOP_TIMEOUT_S
    while pids:
        for pid in list(pids):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                pids.discard(pid)
        if pids and asyncio.get_running_loop().time() > deadline:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            return
        await asyncio.sleep(0.05)
