"""Frontend benchmark: N concurrent streaming chat requests against a rotor server.

Starts the server itself (so it knows its pid), drives it with a minimal
asyncio HTTP/1.1 client (so the client's own cost stays small), and reports
requests/s, chunks/s, time to first token and — the number that matters —
the server process's CPU time per streamed chunk and per completion token,
read from /proc before and after each level.

    python benchmarks/bench.py --scenario echo --concurrency 1 32
    python benchmarks/bench.py --scenario mocker --concurrency 1 32 128
    python benchmarks/bench.py --scenario scripted --scenario tools-plain --scenario tools-calls

`scripted` is the same 128-token answer as `tools-plain` with no tools in the
request (so no tool parser runs): the pair shows what the parser costs on
plain text; `tools-calls` starts the answer with six tool calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

ANSWER_CHARS = 128
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Scenario:
    name: str
    server_args: list[str]
    body: dict
    env: dict[str, str] = field(default_factory=dict)


# A step at a time: every token pays the per-token path, the cost measured here.
MOCKER = ("out=mocker", "--speedup-ratio", "0", "--step-slice-ms", "0")


def _plain_text(n: int) -> str:
    words = "the quick brown fox jumps over a lazy dog while rotor streams tokens ".split()
    out = []
    while len(" ".join(out)) < n:
        out.append(words[len(out) % len(words)])
    return " ".join(out)[:n]


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def scenarios() -> dict[str, Scenario]:
    msg = [{"role": "user", "content": "x" * ANSWER_CHARS}]
    plain = _plain_text(600)  # ≈128+ tokens with the built-in test tokenizer
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    calls = (call + "\n") * 6
    return {
        "echo": Scenario("echo", ["out=echo"], {"messages": msg}, {"ROTOR_ECHO_DELAY_MS": "0"}),
        "mocker": Scenario(
            "mocker",
            list(MOCKER),
            {
                "messages": [{"role": "user", "content": "hello there"}],
                "max_tokens": 128,
                "ignore_eos": True,
            },
        ),
        "scripted": Scenario(
            "scripted",
            [*MOCKER, "--tool-call-parser", "hermes"],
            {
                "messages": [{"role": "user", "content": "hello there"}],
                "max_tokens": 128,
                "mock": {"output": plain, "end": "length"},
            },
        ),
        "tools-plain": Scenario(
            "tools-plain",
            [*MOCKER, "--tool-call-parser", "hermes"],
            {
                "messages": [{"role": "user", "content": "hello there"}],
                "tools": TOOLS,
                "max_tokens": 128,
                "mock": {"output": plain, "end": "length"},
            },
        ),
        "tools-calls": Scenario(
            "tools-calls",
            [*MOCKER, "--tool-call-parser", "hermes"],
            {
                "messages": [{"role": "user", "content": "hello there"}],
                "tools": TOOLS,
                "max_tokens": 128,
                "mock": {"output": calls + plain, "end": "length"},
            },
        ),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


@dataclass
class Result:
    chunks: int = 0
    tokens: int = 0
    ttft: float = 0.0
    seconds: float = 0.0


async def one_request(port: int, payload: bytes) -> Result:
    """POST, then read the chunked SSE body counting `data:` events."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.perf_counter()
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
        + payload
    )
    await writer.drain()
    res = Result()
    buf = b""
    while True:
        data = await reader.read(65536)
        if not data:
            break
        if not res.ttft and b'"content":"' in data and b'"content":""' not in data[:400]:
            res.ttft = time.perf_counter() - t0
        buf += data
    res.seconds = time.perf_counter() - t0
    writer.close()
    for line in buf.split(b"\n"):
        if line.startswith(b"data: {"):
            res.chunks += 1
            if b'"usage"' in line and b'"choices":[]' in line:
                res.tokens = json.loads(line[6:])["usage"]["completion_tokens"]
    if not res.ttft:
        res.ttft = res.seconds
    return res


async def run_level(
    port: int, body: dict, concurrency: int, total: int
) -> tuple[list[Result], float]:
    payload = json.dumps(
        {**body, "model": "", "stream": True, "stream_options": {"include_usage": True}}
    ).encode()
    payload = payload.replace(b'"model": "", ', b"")
    sem = asyncio.Semaphore(concurrency)

    async def bounded() -> Result:
        async with sem:
            return await one_request(port, payload)

    t0 = time.perf_counter()
    results = await asyncio.gather(*(bounded() for _ in range(total)))
    return list(results), time.perf_counter() - t0


def start_server(sc: Scenario, port: int) -> subprocess.Popen:
    env = {**os.environ, **sc.env}
    cmd = [sys.executable, "-m", "rotor.cli", "run", *sc.server_args, "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not start")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--scenario", action="append", choices=sorted(scenarios()), help="repeatable")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    ap.add_argument(
        "--requests", type=int, default=0, help="per level (default: 20 × concurrency, ≥ 50)"
    )
    ap.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    args = ap.parse_args()
    names = args.scenario or ["echo"]
    print(
        f"{'scenario':<12} {'conc':>5} {'req/s':>8} {'chunks/s':>9} {'ttft p50 ms':>12} "
        f"{'ttft p99 ms':>12} {'cpu µs/chunk':>13} {'cpu µs/token':>13} {'cpu ms/req':>11}"
    )
    for name in names:
        sc = scenarios()[name]
        port = free_port()
        proc = start_server(sc, port)
        try:
            asyncio.run(run_level(port, sc.body, 4, 8))  # warm up
            for conc in args.concurrency:
                total = args.requests or max(50, 20 * conc)
                cpu0 = cpu_seconds(proc.pid)
                results, wall = asyncio.run(run_level(port, sc.body, conc, total))
                cpu = cpu_seconds(proc.pid) - cpu0
                chunks = sum(r.chunks for r in results)
                tokens = sum(r.tokens for r in results)
                ttfts = sorted(r.ttft for r in results)
                row = {
                    "scenario": name,
                    "concurrency": conc,
                    "requests": total,
                    "req_per_s": total / wall,
                    "chunks_per_s": chunks / wall,
                    "ttft_p50_ms": 1000 * statistics.median(ttfts),
                    "ttft_p99_ms": 1000 * ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))],
                    "cpu_us_per_chunk": 1e6 * cpu / max(chunks, 1),
                    "cpu_us_per_token": 1e6 * cpu / max(tokens, 1),
                    "cpu_ms_per_request": 1000 * cpu / total,
                }
                if args.json:
                    print(json.dumps(row))
                else:
                    print(
                        f"{name:<12} {conc:>5} {row['req_per_s']:>8.1f} {row['chunks_per_s']:>9.0f} "
                        f"{row['ttft_p50_ms']:>12.2f} {row['ttft_p99_ms']:>12.2f} "
                        f"{row['cpu_us_per_chunk']:>13.1f} {row['cpu_us_per_token']:>13.1f} "
                        f"{row['cpu_ms_per_request']:>11.2f}",
                        flush=True,
                    )
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
