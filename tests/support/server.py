"""Start a real `rotor run` server on a free loopback port for end-to-end tests."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import anthropic
import httpx
import openai

from support.wait import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str  # http://127.0.0.1:PORT
    process: subprocess.Popen
    log_file: IO[bytes] | None = None

    @property
    def log(self) -> str:
        """Everything the server wrote to stdout and stderr so far."""
        assert self.log_file is not None
        return log_text(self.log_file)

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    @property
    def grpc(self) -> str:
        """Where it serves KServe gRPC (`--grpc-port`), as `host:port`: the
        line it says once the port is bound, before its HTTP line."""
        found = GRPC_ANNOUNCED.search(self.log)
        assert found is not None, f"no KServe gRPC line in the log:\n{self.log}"
        return found.group(1)

    def openai(self, api_key: str = "unused") -> openai.OpenAI:
        """The official OpenAI client for this server (no retries)."""
        return openai.OpenAI(base_url=self.v1, api_key=api_key, max_retries=0)

    def anthropic(self, api_key: str = "unused") -> anthropic.Anthropic:
        """The official Anthropic client for this server (no retries)."""
        return anthropic.Anthropic(base_url=self.url, api_key=api_key, max_retries=0)

    def tokenize(
        self,
        text: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> list[int]:
        """POST /tokenize: the ids of `text`, or of the chat prompt `messages`
        render to; `extra` goes into the body as is (model, tools,
        add_special_tokens, chat_template_kwargs …)."""
        assert (text is None) != (messages is None), "give text or messages"
        body = {"prompt": text} if text is not None else {"messages": messages}
        r = httpx.post(self.url + "/tokenize", json={**body, **extra}, timeout=10)
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["count"] == len(data["tokens"]), data
        return data["tokens"]

    def detokenize(self, ids: list[int], **extra: Any) -> str:
        """POST /detokenize: the text of `ids`, special tokens included."""
        r = httpx.post(self.url + "/detokenize", json={"tokens": ids, **extra}, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["prompt"]

    def metric(self, name: str, labels: str = "") -> float:
        """Sum of the Prometheus samples whose name (and label text) match; 0 when none."""
        text = httpx.get(self.url + "/metrics", timeout=5).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            if key.split("{")[0] == name and labels in key:
                total += float(value)
        return total


def log_text(log: IO[bytes]) -> str:
    """All a process wrote to `log` so far. pread, never seek: the process
    shares the file offset, and a seek would make it write over the start."""
    fd = log.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")


# rotor's own line saying where it serves once the port is bound (the real
# port, in text or JSON logs); uvicorn's "running on" names the port asked for
ANNOUNCED = re.compile(r"(?:serving .*?|frontend) on (http://127\.0\.0\.1:\d+)")
# and where it serves KServe gRPC (--grpc-port), said before that line
GRPC_ANNOUNCED = re.compile(r"KServe gRPC on (127\.0\.0\.1:\d+)")


def _announced_url(log: IO[bytes]) -> str | None:
    found = ANNOUNCED.search(log_text(log))
    return found.group(1) if found else None


@contextmanager
def rotor_server(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 30,
    launcher: tuple[str, ...] = ("-m", "rotor.cli"),
) -> Iterator[Server]:
    """`rotor run ARGS` on a free port, healthy; `launcher` is how Python
    runs rotor's command line (`-c CODE`: with something of a test's around it)."""
    full_env = {**os.environ, "ROTOR_ECHO_DELAY_MS": "0", **(env or {})}
    # rotor's flags come before a `--`; what follows it is the engine's
    cut = args.index("--") if "--" in args else len(args)
    own, rest = list(args[:cut]), list(args[cut:])
    # Port 0: the server binds a port the kernel picks and says which, so no
    # other process can take a port between our choosing it and its binding.
    cmd = [sys.executable, *launcher, "run", *own, "--port", "0", *rest]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - outlives this block; closed in finally
    proc = subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    url: list[str] = []

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"rotor exited with {proc.returncode}:\n{log_text(log)}")
        if not url:
            found = _announced_url(log)
            if found is None:
                return False
            url.append(found)
        try:
            return httpx.get(url[0] + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for("rotor to become healthy", healthy, timeout, detail=lambda: log_text(log))
        yield Server(url[0], proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
