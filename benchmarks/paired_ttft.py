"""Time to first token of two or more running servers, measured in pairs.

On a shared machine one server's figure moves by tens of percent from one
minute to the next; two servers measured one after the other differ by that
much with no change at all. Here every prompt goes to each server in turn
(the order alternates), one request at a time, over one keep-alive socket per
server with TCP_NODELAY, so every server sees the same machine at the same
moment. TTFT is from the request's first byte sent to the first SSE event
carrying non-empty content.

    python benchmarks/paired_ttft.py before=8301 after=8302 [--requests 400] [--words 150]

Start the servers yourself (`PYTHONPATH=<other checkout>/src python -m
rotor.cli run out=mocker --speedup-ratio 0 --port 8301`, ...). A server
that is a bare ASGI app streaming one event gives the floor of HTTP itself.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import time

from rotor.bench.workload import words

CONTENT = b'"content":"'


class Connection:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def ttft(self, body: dict) -> float | None:
        """One streamed chat completion; seconds to its first content, None if none came."""
        payload = json.dumps(body).encode()
        request = (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        t0 = time.perf_counter()
        self.sock.sendall(request)
        buf, first = b"", None
        while not buf.endswith(b"\r\n0\r\n\r\n"):  # the chunked body's end
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            buf += data
            if first is None and CONTENT in buf:
                events = buf.split(b"\n\n")
                if any(CONTENT in e and b'"content":""' not in e for e in events):
                    first = time.perf_counter() - t0
        return first


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("servers", nargs="+", help="NAME=PORT")
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--words", type=int, default=150, help="prompt length in words")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    servers = [(name, Connection(int(port))) for name, port in (s.split("=") for s in args.servers)]
    rng = random.Random(args.seed)
    results: dict[str, list[float]] = {name: [] for name, _ in servers}
    for i in range(args.warmup + args.requests):
        body = {
            "messages": [{"role": "user", "content": words(rng, args.words)}],
            "max_tokens": args.max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
        for name, conn in servers if i % 2 == 0 else servers[::-1]:
            t = conn.ttft(body)
            if i >= args.warmup and t is not None:
                results[name].append(1e3 * t)
    for name, xs in results.items():
        xs.sort()
        n = len(xs)
        print(
            f"{name}: TTFT p50 {xs[n // 2]:.3f} ms  p10 {xs[n // 10]:.3f}  "
            f"p90 {xs[int(n * 0.9)]:.3f}  ({n} requests)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
