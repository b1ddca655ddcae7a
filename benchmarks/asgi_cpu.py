"""CPU per token of rotor's frontend and mocker with no sockets: the ASGI app
driven directly by N concurrent streaming clients in this process.

The kernel, uvicorn and a load generator on the same two cores make HTTP
figures move by tens of percent between runs; this leaves only rotor's own
Python (middleware, routes, pipeline, SSE framing, the mocker), so a change
to the per-token path shows in a few alternating runs of two checkouts:

    python benchmarks/asgi_cpu.py                      # this checkout
    PYTHONPATH=../other/src python benchmarks/asgi_cpu.py
    python benchmarks/asgi_cpu.py --api messages --scripted   # the APIs side by side

Each "write" yields to the event loop once, as a socket write would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from rotor.api.app import create_app
from rotor.bench.workload import words
from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.model.builtin import builtin_test_model
from rotor.model.loader import load_model
from rotor.pipeline.served import ServedModel
from rotor.serve.gc import settle
from rotor.serve.system import System

PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}


def body(api: str, prompt: str, output_len: int, script: str | None) -> dict[str, Any]:
    """A streamed request of `api` for `output_len` tokens: the mocker's own
    sampled answer (chat, with ignore_eos), or `script` cut at `output_len`
    (the same answer for every API: Anthropic's and Responses' bodies have
    no ignore_eos)."""
    fields: dict[str, Any] = {"stream": True}
    if script is not None:
        fields["mock"] = {"output": script, "end": "length"}
    elif api == "chat":
        fields["ignore_eos"] = True
    if api == "responses":
        return {"input": prompt, "max_output_tokens": output_len, **fields}
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": output_len, **fields}


def scope(payload: bytes, path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ],
        "query_string": b"",
        "root_path": "",
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
        "http_version": "1.1",
        "asgi": {"version": "3.0"},
        "state": {},
    }


async def main(
    streams: int,
    per_stream: int,
    input_len: int,
    output_len: int,
    api: str,
    scripted: bool,
    model_path: str | None = None,
) -> None:
    card, tok = builtin_test_model() if model_path is None else load_model(Path(model_path))
    # a step at a time: every token pays the per-token path, the cost measured here
    engine = MockerEngine(card, tok, MockerConfig(speedup_ratio=0, step_slice_ms=0))
    system = System.local(engine, ServedModel.build(card, tok))
    app = create_app(system.frontend, on_startup=[system.start], on_shutdown=[system.stop])
    rng = random.Random(0)
    writes = 0

    async def call(body: dict[str, Any]) -> None:
        payload = json.dumps(body).encode()
        read = False
        done = asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal read
            if not read:
                read = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal writes
            if message["type"] == "http.response.body":
                writes += 1
                await asyncio.sleep(0)
                if not message.get("more_body"):
                    done.set()

        await app(scope(payload, PATHS[api]), receive, send)

    async def client(n: int) -> None:
        for _ in range(n):
            script = words(rng, 2 * output_len) if scripted else None
            await call(body(api, words(rng, input_len), output_len, script))

    async with app.router.lifespan_context(app):
        settle()  # the collector as a started server sets it
        await asyncio.gather(*(client(2) for _ in range(streams)))  # warm up
        cpu0, writes0, tokens0 = time.process_time(), writes, engine.tokens_generated
        await asyncio.gather(*(client(per_stream) for _ in range(streams)))
        cpu = time.process_time() - cpu0
        tokens = engine.tokens_generated - tokens0
        responses = streams * per_stream
        print(
            f"{1e6 * cpu / tokens:.1f} µs CPU per token ({1e6 * cpu / responses:.0f} µs per "
            f"response), {tokens / responses:.0f} tokens and "
            f"{(writes - writes0) / responses:.0f} writes per response"
        )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=32)
    p.add_argument("--requests-per-stream", type=int, default=8)
    p.add_argument("--input-len", type=int, default=150)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--api", choices=sorted(PATHS), default="chat")
    p.add_argument("--scripted", action="store_true", help="the same scripted answer for any API")
    p.add_argument("--model-path", help="a model directory (default: the built-in test model)")
    a = p.parse_args()
    asyncio.run(
        main(
            a.streams,
            a.requests_per_stream,
            a.input_len,
            a.output_len,
            a.api,
            a.scripted,
            a.model_path,
        )
    )
