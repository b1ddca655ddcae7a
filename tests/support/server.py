"""Start a real `rotor run` server on a free loopback port for end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str  # http://127.0.0.1:PORT
    process: subprocess.Popen

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def metric(self, name: str, labels: str = "") -> float:
        """Sum of a Prometheus sample whose name (and label text) match."""
        text = httpx.get(self.url + "/metrics", timeout=5).text
        total = 0.0
        found = False
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            if key.split("{")[0] == name and labels in key:
                total += float(value)
                found = True
        if not found:
            return 0.0
        return total


@contextmanager
def rotor_server(
    *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> Iterator[Server]:
    port = free_port()
    full_env = {**os.environ, "ROTOR_ECHO_DELAY_MS": "0", **(env or {})}
    cmd = [sys.executable, "-m", "rotor.cli", "run", *args, "--port", str(port)]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - outlives this block; closed in finally
    proc = subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None:
                log.seek(0)
                out = log.read().decode(errors="replace")
                raise RuntimeError(f"rotor exited with {proc.returncode}:\n{out}")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("rotor did not become healthy in time")
            time.sleep(0.05)
        yield Server(url, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
