"""Time to first token on long shared-prefix prompts: a Mooncake-format trace
replayed open loop against rotor and NVIDIA Dynamo 1.6.1, each with four
mocker workers and KV-aware routing, interleaved over `--repeats` rounds.

  rotor   nats-server, 4 × `rotor worker out=mocker`, `rotor frontend --router kv`
  dynamo  python -m dynamo.frontend --router-mode kv + python -m dynamo.mocker
          --num-workers 4 (file discovery, TCP request plane, ZMQ KV events)

Both load one model directory (dynamo_compare.py's byte-level BPE, ChatML)
and replay one trace at its timestamps with `rotor bench --trace FILE
--trace-format mooncake` (one text per hash id: requests that share leading
hash ids share leading text, so each prefix cache sees what the trace's
did). The trace is `--trace FILE` (Mooncake's own format), or one built
here by benchmarks/mooncake_trace.py: prompts of 1k–11k tokens, a few
shared system prompts, follow-up turns that grow an earlier prompt.

Both mockers run at `--speedup-ratio` (simulated time divided by it); their
cost models differ (rotor's: prefill 2 ms + 0.05 ms a token, decode 10 ms a
step; Dynamo's: its own model), so the engines' own time is reported too:
`--calibrate` sends each system one prompt of each size alone first and
prints its TTFT, the engine's part and the frontend's together.

    DYNAMO_VENV=/path/to/dynamo-venv python benchmarks/trace_compare.py --out /tmp/trace-cmp

Writes results per run and summary.md (TTFT and ITL percentiles, CPU of
every server process) to --out. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dynamo_compare import MODEL_NAME, System, free_port, stop_all, write_model_dir  # noqa: E402
from mooncake_trace import generate, write  # noqa: E402

SYSTEMS = ("rotor", "dynamo")


class Running(System):
    """The processes of one system, started in `work` (dynamo_compare's
    System, started as this comparison runs them)."""

    def __init__(self, kind: str, args: argparse.Namespace, model_dir: Path, work: Path) -> None:
        super().__init__(kind, model_dir, work, dynamo_python=None)
        self.args = args

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        a, ratio = self.args, str(self.args.speedup_ratio)
        if self.kind == "dynamo":
            py = str(a.dynamo_venv / "bin" / "python")
            env = {**os.environ, "DYN_FILE_KV": str(self.work / "kv")}
            common = ["--discovery-backend", "file", "--request-plane", "tcp"]
            self._spawn(
                "frontend",
                [py, "-m", "dynamo.frontend", "--http-host", "127.0.0.1"]
                + ["--http-port", str(self.port), "--router-mode", "kv", *common],
                env,
            )
            self._spawn(
                "mocker",
                [py, "-m", "dynamo.mocker", "--model-path", str(self.model_dir)]
                + ["--model-name", MODEL_NAME, "--num-workers", str(a.workers)]
                + ["--speedup-ratio", ratio, "--block-size", str(a.block_size), *common],
                env,
            )
            return
        from rotor.runtime.nats.server import command as nats_command

        nats_port = free_port()
        nats = f"nats://127.0.0.1:{nats_port}"
        self._spawn("nats", nats_command("127.0.0.1", nats_port, str(self.work / "js")))
        time.sleep(0.5)
        rotor = [sys.executable, "-m", "rotor.cli"]
        model = ["--model-path", str(self.model_dir), "--model-name", MODEL_NAME]
        for i in range(a.workers):
            self._spawn(
                f"worker{i}",
                rotor
                + ["worker", "out=mocker", "--nats", nats, *model]
                + ["--speedup-ratio", ratio, "--block-size", str(a.block_size)]
                + a.rotor_worker_args.split(),
            )
        self._spawn(
            "frontend",
            rotor + ["frontend", "--nats", nats, "--port", str(self.port), "--router", "kv"],
        )

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{self.kind}: {p.args[:4]} exited; see {self.work}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                    if MODEL_NAME in r.read().decode():
                        if self.kind == "rotor" and not self._all_workers():
                            raise OSError("not every worker yet")
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.kind}: not ready after {timeout:.0f} s; see {self.work}")

    def _all_workers(self) -> bool:
        with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
            body = json.loads(r.read())
        return len(body.get("workers", {}).get(MODEL_NAME, [])) >= self.args.workers

    def stop(self) -> None:
        stop_all(self.procs, timeout=20)


def bench(args: argparse.Namespace, system: Running, trace: Path, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "rotor.cli", "bench", "--url", system.url + "/v1"]
    cmd += ["--model", MODEL_NAME, "--trace", str(trace), "--trace-format", "mooncake"]
    cmd += ["--trace-speedup", str(args.trace_speedup), "--no-progress", "--seed", "0"]
    cmd += ["--tokens-per-word", str(args.tokens_per_word)]
    cmd += ["--server-pid", *map(str, system.pids()), "--output-dir", str(out)]
    (out.parent).mkdir(parents=True, exist_ok=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "results.json").read_text())


def calibrate(system: Running, sizes: list[int], tokens_per_word: float) -> list[str]:
    """One prompt of each size alone, streamed: its TTFT (engine and frontend together)."""
    import random

    from rotor.bench.workload import words

    lines = []
    for size in [sizes[0], *sizes]:  # the first warms what a first request fills
        text = words(random.Random(size), int(size / tokens_per_word))
        body = {
            "model": MODEL_NAME,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 8,
            "stream": True,
        }
        req = urllib.request.Request(
            system.url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        t0 = time.perf_counter()
        first = None
        with urllib.request.urlopen(req, timeout=120) as r:
            for raw in r:
                if first is None and b'"content":"' in raw and b'"content":""' not in raw:
                    first = time.perf_counter() - t0
        lines.append(f"{system.kind}: {size}-token prompt alone, TTFT {1e3 * (first or 0):.1f} ms")
    return lines[1:]


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, default=Path("/tmp/rotor-trace-compare"))
    p.add_argument("--dynamo-venv", type=Path, default=os.environ.get("DYNAMO_VENV"))
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--speedup-ratio", type=float, default=10.0)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--trace", type=Path, help="a Mooncake-format trace (default: one built here)")
    p.add_argument("--requests", type=int, default=300, help="the built trace's requests")
    p.add_argument("--rate", type=float, default=4.0, help="the built trace's requests/s")
    p.add_argument("--trace-speedup", type=float, default=1.0)
    p.add_argument("--tokens-per-word", type=float, default=1.0)
    p.add_argument("--calibrate", action="store_true")
    p.add_argument(
        "--rotor-worker-args",
        default="",
        help="more flags for rotor's workers: the mocker's cost model "
        "(--prefill-ms-per-token, --prefill-overhead-ms, --decode-ms-per-step)",
    )
    args = p.parse_args()
    if "dynamo" in args.systems and args.dynamo_venv is None:
        p.error("give DYNAMO_VENV (or --dynamo-venv) for the dynamo system")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    model_dir = write_model_dir(out / MODEL_NAME, 8192, 0)
    trace = args.trace
    if trace is None:
        trace = out / "trace.jsonl"
        rows = generate(
            args.requests, args.rate, long_share=0.5, long=(6000, 11000), short=(1000, 3000),
            output=(16, 400), prefixes=3, prefix_blocks=(1, 4), follow_up=0.3, seed=0,
        )  # fmt: skip
        write(trace, rows)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in args.systems}
    notes: list[str] = []
    for r in range(args.repeats):
        order = args.systems if r % 2 == 0 else list(reversed(args.systems))
        for kind in order:
            system = Running(kind, args, model_dir, out / "work" / f"r{r + 1}-{kind}")
            system.start()
            try:
                system.wait_ready()
                if args.calibrate and r == 0:
                    notes += calibrate(system, [1000, 3000, 6000, 11000], args.tokens_per_word)
                    print("\n".join(notes[-4:]), flush=True)
                res = bench(args, system, trace, out / f"r{r + 1}-{kind}")
                runs[kind].append(res)
                s = res["levels"][0]["summary"]
                print(
                    f"r{r + 1} {kind}: TTFT p50 {s['ttft_ms']['p50']:.1f} p99 {s['ttft_ms']['p99']:.1f} ms, "
                    f"ITL p50 {s['itl_ms']['p50']:.2f} p99 {s['itl_ms']['p99']:.2f} ms, "
                    f"{s['completed']}/{s['requests']} ok, lag p99 {s['schedule_lag_ms']['p99']:.1f} ms",
                    flush=True,
                )
            finally:
                system.stop()
    lines = [
        "| system | TTFT p50 | TTFT p90 | TTFT p99 | ITL p50 | ITL p99 | ok | CPU µs/token |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, results in runs.items():
        for res in results:
            s = res["levels"][0]["summary"]
            cpu = (s.get("server_cpu") or {}).get("us_per_output_token")
            lines.append(
                f"| {kind} | {s['ttft_ms']['p50']:.1f} | {s['ttft_ms']['p90']:.1f} | {s['ttft_ms']['p99']:.1f} "
                f"| {s['itl_ms']['p50']:.2f} | {s['itl_ms']['p99']:.2f} | {s['completed']}/{s['requests']} "
                f"| {cpu if cpu is None else round(cpu, 1)} |"
            )
    prompts = [json.loads(line)["input_length"] for line in trace.read_text().splitlines()]
    lines += ["", f"trace {trace}: {len(prompts)} requests, prompt tokens p10 {sorted(prompts)[len(prompts) // 10]}, "
              f"p50 {statistics.median(prompts):.0f}, p90 {sorted(prompts)[len(prompts) * 9 // 10]}", *notes]  # fmt: skip
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
