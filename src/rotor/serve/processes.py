"""N processes serving one port: bind, fork, tie to the parent, watch, stop.

Shared by `rotor run --http-workers` (the parent runs the engine) and
`rotor frontend --http-workers` (the parent only supervises). Each child gets
a listening socket of its own on the same port (SO_REUSEPORT: the kernel
spreads connections over them). A child lives in its own process group, so a
terminal's Ctrl-C reaches the parent alone, which passes one SIGTERM on (two
signals would make uvicorn skip its drain); and it gets SIGTERM from the
kernel when the parent dies, however it dies (PR_SET_PDEATHSIG), so a killed
parent leaves no orphans holding the port.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable

from rotor.lifeline import die_with_parent

log = logging.getLogger("rotor.processes")

STOP_TIMEOUT_S = 15.0


def stop_timeout(shutdown_grace: float) -> float:
    """How long the parent waits for its children to stop: their own drain
    (--shutdown-grace, plus uvicorn's 5 s) and time to close their connections."""
    return shutdown_grace + STOP_TIMEOUT_S


class ProcessError(Exception):
    """The HTTP processes cannot start (a port in use, a bad count); the message says why."""


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host:port` (0: a free port) that shares the port
    with the other processes' (SO_REUSEPORT), not listening yet."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ProcessError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


def listen_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket that shares its port with the other processes'."""
    sock = reuse_port_socket(host, port)
    # Accepted connections inherit it on Linux; the loops set it again anyway.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def listen_all(host: str, port: int, n: int) -> list[socket.socket]:
    """`n` sockets on one port (port 0: the one the first socket got)."""
    if n < 1:
        raise ProcessError(f"--http-workers must be at least 1, got {n}")
    socks = [listen_tcp(host, port)]
    port = socks[0].getsockname()[1]
    try:
        socks += [listen_tcp(host, port) for _ in range(n - 1)]
    except ProcessError:
        for s in socks:
            s.close()
        raise
    return socks


def fork_each(socks: list[socket.socket], serve: Callable[[socket.socket], int]) -> list[int]:
    """One child per socket running `serve(sock)` (its exit status); the
    parent's copies of the sockets are closed. Returns the children's pids."""
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pids = []
    for i, sock in enumerate(socks):
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 1
            try:
                _tie_to(parent)
                for j, other in enumerate(socks):
                    if j != i:
                        other.close()
                code = serve(sock)
            except SystemExit as e:  # a stop signal (below), or serve's own exit
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                log.exception("HTTP process %d failed", os.getpid())
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    for sock in socks:
        sock.close()
    return pids


def _tie_to(parent: int) -> None:
    """This child's own process group, and SIGTERM when `parent` dies. Until
    uvicorn installs its handlers, SIGTERM/SIGINT exit at once; after its
    drain uvicorn raises the signal again, which then exits with 0."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_on_signal)
    os.setpgid(0, 0)
    die_with_parent(parent)


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(0)


async def watch(pids: set[int], stop: asyncio.Event) -> int:
    """Until `stop` is set (0) or a child exits on its own (1: it is logged,
    dropped from `pids`, and `stop` is set)."""
    while not stop.is_set():
        for pid in list(pids):
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                pids.discard(pid)
                log.error(
                    "HTTP process %d exited (%d); stopping", pid, os.waitstatus_to_exitcode(raw)
                )
                stop.set()
                return 1
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except asyncio.TimeoutError:
            pass
    return 0


async def stop_all(pids: set[int], timeout: float = STOP_TIMEOUT_S) -> int:
    """SIGTERM (uvicorn's graceful shutdown), then SIGKILL after `timeout`.
    Returns 0 when every child exited 0 on its own, else 1."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    status = 0
    while pids:
        for pid in list(pids):
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                pids.discard(pid)
                if os.waitstatus_to_exitcode(raw) != 0:
                    status = 1
        if pids and loop.time() > deadline:
            for pid in pids:
                log.error("HTTP process %d did not stop in %.0f s; killing it", pid, timeout)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            pids.clear()
            return 1
        await asyncio.sleep(0.05)
    return status


def stop_signals(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set `stop` (call inside the running loop)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


def supervise(pids: list[int], timeout: float = STOP_TIMEOUT_S) -> int:
    """The parent that only supervises: until SIGTERM/SIGINT or a child's
    exit, then stop the rest. The exit status: 0 when told to stop and every
    child drained and exited 0; 1 otherwise."""

    async def main() -> int:
        stop = asyncio.Event()
        stop_signals(stop)
        alive = set(pids)
        died = await watch(alive, stop)
        return max(died, await stop_all(alive, timeout))

    return asyncio.run(main())
