"""The floor under any Python server's CPU per streamed token: uvicorn (the
server rotor runs in) serving the cheapest streaming ASGI app there is — 128
ready-made chat chunks per request, no engine, no pipeline, no JSON built —
under the same `rotor bench` load as benchmarks/dynamo_compare.py.

  per-event   one write per chunk, one chunk per event-loop turn: what a
              real engine's pace asks (every token its own event and write)
  batched N   N chunks per write (what a frontend that fell behind writes)
  whole       the whole answer in one write: the request's own cost

What is left between rotor's figure and `per-event` is rotor's own work
(engine, pipeline, request handling); what `per-event` costs is the HTTP
server and the kernel's send of one small write, which no Python frontend
streaming one write per token can go under.

    python benchmarks/http_floor.py --concurrency 32 128
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dynamo_compare import free_port, stop_all, wait_serving  # noqa: E402

MODEL = "floor-model"
TOKENS = 128
_PRE = (
    b'data: {"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk",'
    b'"created":1733443200,"model":"floor-model","choices":[{"index":0,"delta":{"content":'
)
_SUF = b'},"logprobs":null,"finish_reason":null}]}\n\n'
_USAGE = (
    b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"floor-model",'
    b'"choices":[],"usage":{"prompt_tokens":163,"completion_tokens":128,"total_tokens":291}}'
    b"\n\ndata: [DONE]\n\n"
)


def app(batch: int) -> Any:
    """The ASGI app: `batch` chunks per write, a write per event-loop turn."""

    async def serve(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/v1/models":
            body = orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i in range(0, TOKENS, batch):
            chunk = b"".join(_PRE + orjson.dumps(f" w{j}") + _SUF for j in range(i, i + batch))
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": _USAGE, "more_body": False})

    return serve


def serve_main(batch: int, port: int) -> None:
    import uvicorn

    uvicorn.run(app(batch), host="127.0.0.1", port=port, log_level="warning", access_log=False)


def run_one(batch: int, concurrency: list[int], duration: float, out: Path) -> dict[str, Any]:
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "_serve", str(batch), str(port)])
    try:
        wait_serving(port, tries=100, pause=0.1, proc=server)
        cmd = [sys.executable, "-m", "rotor.cli", "bench", "--url", f"http://127.0.0.1:{port}/v1"]
        cmd += ["--model", MODEL, "--concurrency", *map(str, concurrency)]
        cmd += ["--duration", str(duration), "--warmup", "64", "--input-len", "150"]
        cmd += ["--output-len", str(TOKENS), "--no-progress", "--server-pid", str(server.pid)]
        cmd += ["--output-dir", str(out)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.loads((out / "results.json").read_text())
    finally:
        stop_all([server])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        serve_main(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--concurrency", type=int, nargs="+", default=[32, 128])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4, TOKENS])
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--out", type=Path, default=Path("/tmp/rotor-http-floor"))
    a = p.parse_args()
    print("| chunks per write | streams | req/s | server CPU µs per token |")
    print("|---|---|---|---|")
    for batch in a.batches:
        res = run_one(batch, a.concurrency, a.duration, a.out / f"batch{batch}")
        for level in res["levels"]:
            s = level["summary"]
            cpu = s["server_cpu"]["us_per_output_token"]
            print(
                f"| {batch} | {level['concurrency']} | {s['request_throughput']:.0f} | {cpu:.2f} |"
            )
    print(f"\n{os.cpu_count()} CPUs; load average {Path('/proc/loadavg').read_text().split()[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
