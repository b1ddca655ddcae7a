"""What inter-token latency the frontend adds at a real engine's pace: the
mocker at `--speedup-ratio 1` (a step of 128 decodes is 16.35 ms), 128
streams, ~160-token prompts, 128-token answers, closed loop (or, with
`--rate R`, requests arriving at R a second, Poisson, at most --streams at
once: a closed loop of equal answers starts every stream again in the same
step, 128 prompts at once; an open loop spreads them).

  engine   the mocker alone in this process: the time between a stream's
           outputs as they leave the engine (pushed, timed on arrival), the
           engine's own step time, batching and queueing included
  rotor    `rotor run out=mocker --speedup-ratio 1` under `rotor bench`: the
           gaps between a stream's events at the client

    python benchmarks/itl_added.py --streams 128 --duration 30 [--rate 55]

Prints both p50/p90/p99 and the difference (what the frontend, HTTP and the
kernel add). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dynamo_compare import (  # noqa: E402
    MODEL_NAME,
    free_port,
    stop_all,
    wait_serving,
    write_model_dir,
)


def _pct(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        q: 1e3 * xs[min(len(xs) - 1, int(len(xs) * f))]
        for q, f in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
    }


async def engine_gaps(
    model_dir: Path, streams: int, duration: float, seed: int, rate: float | None = None
) -> list[float]:
    """The mocker alone: gaps between each stream's outputs (after its first;
    the first `streams` answers warm up)."""
    from rotor.bench.workload import words
    from rotor.engines.mocker import MockerConfig, MockerEngine
    from rotor.model.loader import load_model
    from rotor.protocol.engine import EngineOutput, EngineRequest, StopParams

    card, tok = load_model(model_dir, model_name=MODEL_NAME)
    engine = MockerEngine(card, tok, MockerConfig(speedup_ratio=1))
    await engine.start()
    rng = random.Random(seed)
    gaps: list[float] = []
    deadline = time.perf_counter() + duration
    ids = iter(range(10**9))

    class Timed:
        def __init__(self, keep: bool) -> None:
            self.keep = keep  # (the first answers warm up, as rotor bench's do)
            self.last = time.perf_counter()
            self.done = asyncio.get_running_loop().create_future()

        def outputs(self, outputs: list[EngineOutput]) -> bool:
            now = time.perf_counter()
            if self.keep:
                gaps.append(now - self.last)
            self.last = now
            return True

        def ended(self, error: Any) -> None:
            self.done.set_result(None)

    async def answer(keep: bool) -> None:
        prompt = tok.encode(words(rng, 150))
        stop = StopParams(max_tokens=128, ignore_eos=True)
        stream = engine.generate(EngineRequest(f"r{next(ids)}", MODEL_NAME, prompt, stop=stop))
        await stream.__anext__()
        timed = Timed(keep)
        stream.deliver(timed)
        await timed.done

    async def client() -> None:
        answers = 0
        while time.perf_counter() < deadline:
            await answer(answers > 0)
            answers += 1

    async def arrivals(rate: float) -> None:
        """Open loop: an answer every Exp(rate) seconds, at most `streams` at once."""
        flying: set[asyncio.Task[None]] = set()
        n = 0
        while time.perf_counter() < deadline:
            await asyncio.sleep(rng.expovariate(rate))
            if len(flying) < streams:
                task = asyncio.create_task(answer(n >= streams))
                flying.add(task)
                task.add_done_callback(flying.discard)
                n += 1
        await asyncio.gather(*flying)

    if rate is None:
        await asyncio.gather(*(client() for _ in range(streams)))
    else:
        await arrivals(rate)
    await engine.stop()
    return gaps


def client_gaps(
    model_dir: Path, streams: int, duration: float, out: Path, rate: float | None = None
) -> dict[str, Any]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "rotor.cli", "run", "out=mocker", "--model-path", str(model_dir)]
        + ["--model-name", MODEL_NAME, "--speedup-ratio", "1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_serving(port)
        cmd = [sys.executable, "-m", "rotor.cli", "bench", "--url", f"http://127.0.0.1:{port}/v1"]
        cmd += ["--model", MODEL_NAME, "--duration", str(duration)]
        if rate is None:
            cmd += ["--concurrency", str(streams)]
        else:
            cmd += ["--request-rate", str(rate), "--max-concurrency", str(streams)]
        cmd += ["--warmup", str(streams), "--input-len", "150", "--output-len", "128"]
        cmd += ["--ignore-eos", "on", "--no-progress", "--server-pid", str(server.pid)]
        cmd += ["--output-dir", str(out)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.loads((out / "results.json").read_text())
    finally:
        stop_all([server])


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--streams", type=int, default=128)
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--out", type=Path, default=Path("/tmp/rotor-itl-added"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rate", type=float, help="open loop: requests a second (Poisson)")
    a = p.parse_args()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    model_dir = write_model_dir(out / MODEL_NAME, 8192, a.seed)
    engine = _pct(asyncio.run(engine_gaps(model_dir, a.streams, a.duration, a.seed, a.rate)))
    res = client_gaps(model_dir, a.streams, a.duration, out / "rotor", a.rate)
    level = res["levels"][0]
    client = _pct([g for q in level["requests"] for g in (q.get("itl_s") or [])])
    events = statistics.fmean(len(q.get("itl_s") or []) + 1 for q in level["requests"])
    cpu = level["summary"]["server_cpu"]["us_per_output_token"]
    for name, pct in (("engine alone", engine), ("client (rotor run)", client)):
        print(f"{name:20s} ITL p50 {pct['p50']:.2f}  p90 {pct['p90']:.2f}  p99 {pct['p99']:.2f} ms")
    print(
        f"added by the frontend: p50 {client['p50'] - engine['p50']:+.2f}  "
        f"p99 {client['p99'] - engine['p99']:+.2f} ms ({events:.0f} events per answer, "
        f"server CPU {cpu:.1f} µs per token)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
