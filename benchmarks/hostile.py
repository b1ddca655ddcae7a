"""Hostile requests against a real server: for each, its status, the longest
/live wait while it ran, and the server's RSS growth (issue 15's figures).

    python benchmarks/hostile.py [--src DIR]   # DIR: another checkout's src/ (before/after)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.server import free_port  # noqa: E402

ENDLESS = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Server:
    def __init__(self, src: str | None, *args: str) -> None:
        self.port = free_port()
        env = {**os.environ, "ROTOR_ECHO_DELAY_MS": "0"}
        if src:
            env["PYTHONPATH"] = src
        cmd = [sys.executable, "-m", "rotor.cli", "run", *args, "--port", str(self.port)]
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(300):
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not start")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def measure(srv: Server, work: Callable[[], Any], limit: float = 60) -> dict[str, Any]:
    before = rss_mb(srv.proc.pid)
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(work()), daemon=True)
    t0 = time.monotonic()
    t.start()
    worst = 0.0
    while t.is_alive() and time.monotonic() - t0 < limit:
        s = time.monotonic()
        try:
            httpx.get(srv.url + "/live", timeout=limit)
        except httpx.HTTPError:
            pass
        worst = max(worst, time.monotonic() - s)
        time.sleep(0.02)
    t.join(1)
    status = out[0] if out else f"still running after {limit:.0f} s"
    return {
        "status": status,
        "live_max_s": round(worst, 2),
        "rss_mb": round(rss_mb(srv.proc.pid) - before),
    }


def post(url: str, body: dict[str, Any], timeout: float = 120) -> Any:
    try:
        return httpx.post(url, json=body, timeout=timeout).status_code
    except httpx.HTTPError as e:
        return type(e).__name__


def slow_readers(srv: Server, n: int = 10, hold: float = 3.0) -> dict[str, Any]:
    before = rss_mb(srv.proc.pid)
    body = json.dumps(
        {
            "model": "mock-model",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": 30000,
            "ignore_eos": True,
            "logprobs": True,
            "top_logprobs": 5,
        }
    ).encode()
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", srv.port))
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        socks.append(s)
    time.sleep(hold)
    metrics = httpx.get(srv.url + "/metrics").text
    tokens = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("rotor_engine_generated_tokens_total{")
    )
    grown = rss_mb(srv.proc.pid) - before
    closing = measure(srv, lambda: [s.close() for s in socks] and "closed", 30)
    return {
        "tokens_made_unread": int(tokens),
        "rss_mb": round(grown),
        "live_max_s_on_close": closing["live_max_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", help="PYTHONPATH of the rotor to measure (default: installed)")
    ap.add_argument("--after", action="store_true", help="pass this branch's new flags")
    a = ap.parse_args()
    results: dict[str, Any] = {}
    srv = Server(a.src, "out=mocker", "--speedup-ratio", "0")
    try:
        v1 = srv.url + "/v1"
        huge = "word " * 2_000_000
        results["chat 10 MB"] = measure(
            srv,
            lambda: post(
                v1 + "/chat/completions", {"messages": [{"role": "user", "content": huge}]}
            ),
        )
        results["300k empty messages"] = measure(
            srv,
            lambda: post(
                v1 + "/chat/completions", {"messages": [{"role": "user", "content": ""}] * 300_000}
            ),
        )
        results["/tokenize 10 MB"] = measure(
            srv, lambda: post(srv.url + "/tokenize", {"prompt": huge})
        )
        results["2000 prompts x n=16"] = measure(
            srv,
            lambda: post(
                v1 + "/completions", {"prompt": [[1, 2, 3]] * 2000, "n": 16, "max_tokens": 1}
            ),
        )
        results["slow readers x10"] = slow_readers(srv)
    finally:
        srv.close()
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write(ENDLESS)
    extra = ("--template-timeout", "2") if a.after else ()
    srv = Server(a.src, "out=mocker", "--speedup-ratio", "0", "--chat-template", f.name, *extra)
    try:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        results["endless template"] = measure(
            srv, lambda: post(srv.url + "/v1/chat/completions", body, 25), 20
        )
    finally:
        srv.close()
    for name, r in results.items():
        print(f"{name:24} {r}")


if __name__ == "__main__":
    main()
