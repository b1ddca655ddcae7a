"""TTFT per priority class under overload: the mocker at real speed with a
few sequence slots, sent more streaming requests than it can serve, half at
priority 0 (high) and half at priority 10 (low), in a seeded random order.

`--mode engine` (the default) orders them in the engine: run once under
`--scheduling-policy priority` and once under fcfs (the same requests, sent
without `priority`, which an fcfs engine refuses) as the baseline.

`--mode frontend` orders them in the frontend's admission line: the server
keeps `--max-queued-requests` places (1 by default, so the engine never has
more than one request waiting of its own to order) and a line of
`--max-waiting-requests` behind them; run once with priorities (the engine
under `--scheduling-policy priority`: a nonzero priority to an fcfs engine
is a 400) and once without (an fcfs engine: the line is first come, first
served) as the baseline. A line shorter than the overload refuses its worst
(503s, counted per class).

Prints TTFT p50/p99 per class for each run.

    python benchmarks/priority.py [--mode engine|frontend] [--requests 120] [--rate 20]
        [--max-num-seqs 4] [--max-queued 1] [--max-waiting 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request

import httpx

HIGH, LOW = 0, 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    policy: str, max_num_seqs: int, port: int, extra: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "rotor.cli", "run", "out=mocker", "--speedup-ratio", "1",
        "--scheduling-policy", policy, "--max-num-seqs", str(max_num_seqs),
        "--port", str(port), *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=os.environ, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start")


async def ttft(client: httpx.AsyncClient, priority: int | None, tokens: int) -> float | None:
    """Seconds from sending to the first SSE event with content; None when
    refused with 503 (the admission line full)."""
    body = {
        "model": "mock-model",
        "prompt": "Tell me a story",
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
    }
    if priority is not None:
        body["priority"] = priority
    t0 = time.perf_counter()
    first = 0.0
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code == 503:
            return None
        r.raise_for_status()
        async for line in r.aiter_lines():
            text = not first and line.startswith("data: {")
            if text and json.loads(line[6:])["choices"][0].get("text"):
                first = time.perf_counter() - t0
    return first


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(
    url: str, send_priority: bool, args: argparse.Namespace
) -> dict[int, list[float | None]]:
    rng = random.Random(0)
    classes = [HIGH, LOW] * (args.requests // 2)
    rng.shuffle(classes)
    limits = httpx.Limits(max_connections=args.requests)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        tasks = []
        for cls in classes:
            prio = cls if send_priority else None
            tasks.append(asyncio.create_task(ttft(client, prio, args.tokens)))
            await asyncio.sleep(rng.expovariate(args.rate))
        results = await asyncio.gather(*tasks)
    by_class: dict[int, list[float | None]] = {HIGH: [], LOW: []}
    for cls, t in zip(classes, results, strict=True):
        by_class[cls].append(t)
    return by_class


def runs(args: argparse.Namespace) -> list[tuple[str, str, bool, tuple[str, ...]]]:
    """(label, engine policy, send priorities, server flags) of each run."""
    if args.mode == "engine":
        return [("priority", "priority", True, ()), ("fcfs", "fcfs", False, ())]
    line = (
        "--max-queued-requests", str(args.max_queued),
        "--max-waiting-requests", str(args.max_waiting),
    )  # fmt: skip
    return [("line prio", "priority", True, line), ("line fifo", "fcfs", False, line)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mode", choices=("engine", "frontend"), default="engine")
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--rate", type=float, default=20.0, help="requests a second (Poisson)")
    ap.add_argument("--tokens", type=int, default=40, help="output tokens a request")
    ap.add_argument("--max-num-seqs", type=int, default=4)
    ap.add_argument("--max-queued", type=int, default=1, help="frontend: admission places")
    ap.add_argument("--max-waiting", type=int, default=1000, help="frontend: the line")
    args = ap.parse_args()
    head = f"{'run':<10} {'class':<12} {'n':>4} {'503':>4} {'ttft p50 ms':>12} {'ttft p99 ms':>12}"
    print(head)
    for label, policy, send_priority, extra in runs(args):
        port = free_port()
        proc = start(policy, args.max_num_seqs, port, extra)
        try:
            url = f"http://127.0.0.1:{port}"
            by_class = asyncio.run(run(url, send_priority, args))
        finally:
            proc.terminate()
            proc.wait()
        for cls, name in ((HIGH, "high (0)"), (LOW, "low (10)")):
            t = [v for v in by_class[cls] if v is not None]
            refused = len(by_class[cls]) - len(t)
            p50, p99 = (pct(t, 0.5) * 1e3, pct(t, 0.99) * 1e3) if t else (0.0, 0.0)
            print(f"{label:<10} {name:<12} {len(t):>4} {refused:>4} {p50:>12.0f} {p99:>12.0f}")


if __name__ == "__main__":
    main()
