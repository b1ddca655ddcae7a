"""Real distributed pieces for end-to-end tests: a nats-server on a free
loopback port, and `rotor worker` / `rotor frontend` processes that can be
killed for real (SIGKILL, SIGTERM)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

import httpx

from rotor.runtime.nats.server import command as nats_command

from support.server import ANNOUNCED, Server, free_port, log_text
from support.wait import wait_for  # the cluster tests import it from here too

WORKER_LINE = re.compile(rb"worker ([0-9a-f]+) serves")  # text or --log-format json


@dataclass
class Proc:
    process: subprocess.Popen
    log: IO[bytes]

    def text(self) -> str:
        return log_text(self.log)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def _spawn(cmd: list[str], env: dict[str, str] | None = None) -> Proc:
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by Proc.stop
    full_env = {**os.environ, "ROTOR_ECHO_DELAY_MS": "0", **(env or {})}
    process = subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    return Proc(process, log)


@dataclass
class Nats:
    url: str
    port: int
    store: str
    proc: Proc

    def restart(self) -> None:
        """Stop the server and start it again on the same port (an empty store)."""
        self.proc.kill()
        self.proc.log.close()
        self.store = tempfile.mkdtemp(prefix="rotor-nats-")
        self.proc = _start_nats(self.port, self.store)


def _start_nats(port: int, store: str) -> Proc:
    proc = _spawn(nats_command("127.0.0.1", port, store))
    wait_for("nats-server", lambda: "Server is ready" in log_text(proc.log), 15)
    return proc


@contextmanager
def nats_server() -> Iterator[Nats]:
    port = free_port()
    store = tempfile.mkdtemp(prefix="rotor-nats-")
    nats = Nats(f"nats://127.0.0.1:{port}", port, store, _start_nats(port, store))
    try:
        yield nats
    finally:
        nats.proc.stop()


@dataclass
class Worker:
    id: str
    proc: Proc
    system_url: str | None = None

    def metric(self, name: str) -> float:
        assert self.system_url is not None, "start the worker with system=True"
        text = httpx.get(self.system_url + "/metrics", timeout=5).text
        return sum(
            float(line.rpartition(" ")[2])
            for line in text.splitlines()
            if not line.startswith("#") and line.split("{")[0].split(" ")[0] == name
        )


def start_worker(
    nats: Nats,
    *args: str,
    system: bool = False,
    system_host: str = "127.0.0.1",
    timeout: float = 30,
    env: dict[str, str] | None = None,
) -> Worker:
    """`rotor worker ARGS` registered on `nats`; words after `--` in ARGS stay
    last (they are the engine's own). `system`: with a `--system-port` on
    `system_host`."""
    words = list(args)
    engine_words: list[str] = []
    if "--" in words:
        cut = words.index("--")
        words, engine_words = words[:cut], words[cut:]
    cmd = [sys.executable, "-m", "rotor.cli", "worker", "--nats", nats.url, *words]
    system_url = None
    if system:
        port = free_port()
        cmd += ["--system-port", str(port), "--system-host", system_host]
        system_url = f"http://{system_host}:{port}"
    proc = _spawn(cmd + engine_words, env)
    found: list[str] = []

    def registered() -> bool:
        match = WORKER_LINE.search(log_text(proc.log).encode())
        if match:
            found.append(match.group(1).decode())
            return True
        if proc.process.poll() is not None:
            raise RuntimeError(f"the worker exited with {proc.process.returncode}:\n{proc.text()}")
        return False

    wait_for("the worker to register", registered, timeout, detail=proc.text)
    return Worker(found[0], proc, system_url)


@dataclass
class Frontend(Server):
    proc: Proc = field(default=None)  # type: ignore[assignment]

    def workers(self, model: str) -> list[str]:
        """The ids of the model's live workers, as /health lists them."""
        body = httpx.get(self.url + "/health", timeout=5).json()
        return [w["id"] for w in body.get("workers", {}).get(model, [])]

    def wait_workers(self, model: str, ids: set[str], timeout: float = 30) -> None:
        wait_for(
            f"workers {sorted(ids)} of {model}", lambda: set(self.workers(model)) == ids, timeout
        )


def start_frontend(
    nats: Nats, *args: str, timeout: float = 30, env: dict[str, str] | None = None
) -> Frontend:
    # Port 0: the frontend binds a port the kernel picks and announces it (no race)
    cmd = [
        sys.executable, "-m", "rotor.cli", "frontend",
        "--nats", nats.url, "--port", "0", *args,
    ]  # fmt: skip
    proc = _spawn(cmd, env)
    url: list[str] = []

    def up() -> bool:
        if proc.process.poll() is not None:
            raise RuntimeError(f"the frontend exited:\n{proc.text()}")
        if not url:
            found = ANNOUNCED.search(log_text(proc.log))
            if found is None:
                return False
            url.append(found.group(1))
        try:
            return httpx.get(url[0] + "/live", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for("the frontend", up, timeout)
    return Frontend(url[0], proc.process, proc.log, proc=proc)


@contextmanager
def cluster_procs() -> Iterator[list[Proc]]:
    """A list to append processes to; every one is stopped at the end."""
    procs: list[Proc] = []
    try:
        yield procs
    finally:
        for proc in procs:
            proc.stop()
