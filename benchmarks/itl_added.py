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
           gaps between a stream's events at the client, and in the same
           run the engine's own: the gaps between the times its steps'
           outputs were due (the simulated step times, not when the event
           loop let the engine hand them over), recorded in the server

    python benchmarks/itl_added.py --streams 128 --duration 30 [--rate 55]

Prints the three p50/p90/p99 and the client's against each engine's. The
one that answers "what does the frontend add" is the client against its
own engine in the same run: how a closed loop's streams fall into step
with each other, and so how many steps prefill, differs from run to run,
which moves the p99 of a separate engine-alone run by tens of ms. Not part
of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dynamo_compare import (  # noqa: E402
    MODEL_NAME,
    events_per_answer,
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
    from rotor.protocol.engine import EngineOutput, EngineRequest, StopParams, pulled

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

        def put(self, item: EngineOutput) -> bool:
            now = time.perf_counter()
            if self.keep:
                gaps.append(now - self.last)
            self.last = now
            return True

        def end(self, error: Any) -> None:
            self.done.set_result(None)

    async def answer(keep: bool) -> None:
        prompt = tok.encode(words(rng, 150))
        stop = StopParams(max_tokens=128, ignore_eos=True)
        stream = pulled(
            engine.generate(EngineRequest(f"r{next(ids)}", MODEL_NAME, prompt, stop=stop))
        )
        await stream.__anext__()
        timed = Timed(keep)
        stream.subscribe(timed)  # the rest pushed, as the frontend's response takes them
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
        [sys.executable, __file__, "_serve", str(out / "engine-gaps.json")]
        + ["out=mocker", "--model-path", str(model_dir)]
        + ["--model-name", MODEL_NAME, "--speedup-ratio", "1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_serving(port, proc=server)
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


def serve_timed(gaps_file: str, argv: list[str]) -> int:
    """`rotor run ARGV`, its mocker's due times recorded: for each request,
    the gaps between the steps that made its outputs (when each step's
    outputs were due, its first included), written to `gaps_file` at exit."""
    import atexit
    import signal

    from rotor import cli
    from rotor.engines.mocker.sequence import Sequence
    from rotor.engines.mocker.step_loop import StepLoop

    last: dict[str, float] = {}  # request id -> when its last output was due
    gaps: list[float] = []
    plain_sample = StepLoop._sample

    def sample(self: StepLoop, seq: Sequence) -> bool:
        made = len(seq.token_ids)
        first = plain_sample(self, seq)
        due = self._paced_until
        if due and len(seq.token_ids) > made:  # this step made the sequence tokens
            prev = last.get(seq.request_id)
            if prev is not None and prev != due:
                gaps.append(due - prev)
            last[seq.request_id] = due
        return first

    StepLoop._sample = sample  # type: ignore[method-assign]
    atexit.register(lambda: Path(gaps_file).write_text(json.dumps(gaps)))
    # uvicorn raises the SIGTERM it caught again once it has shut down: exit, atexit included
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    return cli.main(["run", *argv])


def main() -> int:
    if sys.argv[1:2] == ["_serve"]:
        return serve_timed(sys.argv[2], sys.argv[3:])
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
    events = events_per_answer(level)  # (the answers that ended without an error)
    if events is None:
        raise RuntimeError(f"every request failed; see {out / 'rotor' / 'results.json'}")
    client = _pct([g for q in level["requests"] for g in (q.get("itl_s") or [])])
    inside = _pct(json.loads((out / "rotor" / "engine-gaps.json").read_text()))
    cpu = level["summary"]["server_cpu"]["us_per_output_token"]
    rows = (("engine alone", engine), ("engine in rotor run", inside), ("client", client))
    for name, pct in rows:
        print(f"{name:20s} ITL p50 {pct['p50']:.2f}  p90 {pct['p90']:.2f}  p99 {pct['p99']:.2f} ms")
    for base, pct in (("engine alone", engine), ("its engine", inside)):
        added = "  ".join(f"{q} {client[q] - pct[q]:+.2f}" for q in ("p50", "p90", "p99"))
        print(f"the client against {base}: {added} ms")
    print(f"({events:.0f} events per answer, server CPU {cpu:.1f} µs per token)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
