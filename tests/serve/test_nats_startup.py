"""Starting without NATS, and stopping at any point of startup: `rotor
frontend` and `rotor worker` say that NATS cannot be reached (and keep saying
it) instead of waiting in silence, and a SIGTERM or SIGINT during that wait
ends them at once. `rotor nats` stops its nats-server when it is told to
stop, and when it is killed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from support.cluster import Proc, _spawn, wait_for
from support.server import free_port

ROTOR = [sys.executable, "-m", "rotor.cli"]
MISSING = "cannot reach NATS at"


def silent_nats_url() -> str:
    """A loopback port nobody listens on."""
    return f"nats://127.0.0.1:{free_port()}"


def said(proc: Proc, text: str) -> bool:
    return proc.text().count(text) > 0


def ended(proc: Proc) -> bool:
    return proc.process.poll() is not None


COMMANDS = {
    "frontend": ["frontend", "--port", "0"],
    "worker": ["worker", "out=mocker"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_no_nats_is_said_and_a_stop_signal_ends_startup(command: str, sig: int) -> None:
    proc = _spawn([*ROTOR, *COMMANDS[command], "--nats", silent_nats_url()])
    try:
        wait_for("the missing NATS to be said", lambda: said(proc, MISSING))
        # ... and said again while it is still missing (it never goes quiet)
        wait_for("the missing NATS to be said again", lambda: proc.text().count(MISSING) >= 2)
        assert "Connection refused" in proc.text() or "Connect call failed" in proc.text()
        proc.process.send_signal(sig)
        wait_for("the process to end", lambda: ended(proc))
        # as when it is stopped while serving: 0, or (uvicorn re-raises the
        # signal once it has shut down) the signal's own status
        assert proc.process.returncode in (0, -sig)
        assert "stopped before" in proc.text()
    finally:
        proc.stop()


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead; its parent has just not reaped it
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_rotor_nats_takes_its_server_with_it(tmp_path: Path, sig: int) -> None:
    port = free_port()
    proc = _spawn([*ROTOR, "nats", "--port", str(port), "--store", str(tmp_path)])
    try:
        wait_for("nats-server to listen", lambda: listening(port))
        (server,) = children(proc.process.pid)
        proc.process.send_signal(sig)
        wait_for("rotor nats to end", lambda: ended(proc))
        wait_for("its nats-server to end", lambda: not alive(server))
        assert not listening(port)
        if sig != signal.SIGKILL:
            assert proc.process.returncode == 0
        # the port is free again: the next `rotor nats` there serves
        again = _spawn([*ROTOR, "nats", "--port", str(port), "--store", str(tmp_path)])
        try:
            wait_for("a second rotor nats to listen", lambda: listening(port))
            assert again.process.poll() is None
        finally:
            again.stop()
    finally:
        proc.stop()
        subprocess.run(["pkill", "-f", f"nats-server.*-p {port} "], check=False)
