"""Image-aware KV routing: 4 mocker workers and a frontend over NATS (real
processes, benchmarks/cluster.py), chat requests with one `data:` URL image
each, `--router kv` against `round_robin`.

    python benchmarks/images_kv.py --model-path DIR [--requests 200] [--reuse 0.8]

DIR is a vision-language model's directory (its tokenizer, chat template and
processor files: the mocker needs no weights), e.g. a Qwen2-VL one or the
tiny one the tests build (the support module `vlm`). Every request has the
same text; what differs is the image: with probability `--reuse` one already
sent (picked at random among them), else a new one (8 x 8 random colours
scaled up: a few KB, and their content hashes differ). Block hashes that ignored the image would make every request after
the first a full hit; with the image in the hash only a repeat can hit.

Reported per router: the prompt-cache hit ratio (cached / prompt tokens, from
each answer's usage) against the ideal (every repeat cached in full but its
last block, a new image nothing), their quotient (goal ≥ 0.9 for kv), and
TTFT p50 (goal: kv ≤ 0.5 × round_robin's). Both runs send the same requests
in the same order, closed loop at `--concurrency`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import random
import statistics
import time

import httpx
from cluster import Cluster  # benchmarks/cluster.py (this script's directory)
from PIL import Image

MODEL = "mock-model"  # the served name (cluster.wait_health waits for it)
TEXT = "Describe this image in one short sentence."


def workload(requests: int, reuse: float, size: int, seed: int) -> list[tuple[int, bytes]]:
    """(image number, PNG bytes) per request, in sending order."""
    rng = random.Random(seed)
    images: list[bytes] = []
    order: list[tuple[int, bytes]] = []
    for _ in range(requests):
        if images and rng.random() < reuse:
            k = rng.randrange(len(images))
        else:
            # 8 x 8 random colours scaled up: a picture of its own, a few KB as
            # PNG (the figure is the router's, not the transfer of megabytes)
            grid = Image.frombytes("RGB", (8, 8), rng.randbytes(8 * 8 * 3))
            picture = grid.resize((size, size), Image.Resampling.NEAREST)
            out = io.BytesIO()
            picture.save(out, "PNG")
            images.append(out.getvalue())
            k = len(images) - 1
        order.append((k, images[k]))
    return order


async def one(client: httpx.AsyncClient, url: str, png: bytes) -> tuple[float, int, int]:
    """One streamed chat request: (TTFT s, prompt tokens, cached tokens)."""
    image = "data:image/png;base64," + base64.b64encode(png).decode()
    body = {
        "model": MODEL,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 16,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": image}},
                    {"type": "text", "text": TEXT},
                ],
            }
        ],
    }
    start, ttft, usage = time.perf_counter(), None, {}
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if ttft is None and chunk.get("choices"):
                ttft = time.perf_counter() - start
            usage = chunk.get("usage") or usage
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    assert ttft is not None, "no token came"
    return ttft, usage["prompt_tokens"], cached


async def drive(
    url: str, order: list[tuple[int, bytes]], concurrency: int
) -> list[tuple[float, int, int]]:
    """Every request's `one`, in sending order, `concurrency` at a time."""
    results: dict[int, tuple[float, int, int]] = {}
    queue = list(enumerate(order))
    async with httpx.AsyncClient(timeout=120) as client:

        async def loop() -> None:
            while queue:
                i, (_, png) = queue.pop(0)
                results[i] = await one(client, url, png)

        await asyncio.gather(*(loop() for _ in range(concurrency)))
    return [results[i] for i in range(len(order))]


def run(router: str, args: argparse.Namespace, order: list[tuple[int, bytes]]) -> dict:
    worker = ("out=mocker", "--model-path", args.model_path, "--model-name", MODEL)
    worker += ("--speedup-ratio", "1", "--block-size", str(args.block_size))
    c = Cluster(4, worker_args=worker, frontend_args=("--router", router))
    try:
        results = asyncio.run(drive(c.frontends[0][0], order, args.concurrency))
    finally:
        c.close()
    seen: set[int] = set()
    ideal = 0
    for (k, _), (_, prompt, _) in zip(order, results, strict=True):
        if k in seen:
            ideal += (prompt - 1) // args.block_size * args.block_size
        seen.add(k)
    prompt_tokens = sum(r[1] for r in results)
    hit, best = sum(r[2] for r in results) / prompt_tokens, ideal / prompt_tokens
    ttft = statistics.median(r[0] for r in results) * 1000
    print(
        f"{router}: hit ratio {hit:.3f} (ideal {best:.3f}: {hit / best:.2f} x), "
        f"TTFT p50 {ttft:.1f} ms, {prompt_tokens / len(results):.0f} prompt tokens per request"
    )
    return {"hit": hit, "ideal": best, "ttft_p50_ms": ttft}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", required=True, help="a vision-language model's directory")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--reuse", type=float, default=0.8)
    parser.add_argument("--image-size", type=int, default=448, help="pixels per side")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    order = workload(args.requests, args.reuse, args.image_size, args.seed)
    print(f"{len(order)} requests, {len({k for k, _ in order})} distinct images")
    kv, rr = run("kv", args, order), run("round_robin", args, order)
    print(f"kv TTFT p50 / round_robin's: {kv['ttft_p50_ms'] / rr['ttft_p50_ms']:.2f}")


if __name__ == "__main__":
    main()
