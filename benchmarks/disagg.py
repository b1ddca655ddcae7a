"""Disaggregated serving against aggregated, at equal worker count, all real
processes: a nats-server, `rotor worker out=mocker` workers with a cost model
of a real GPU at `--speedup-ratio 1`, `rotor frontend --router kv
--disagg-policy P`, and `rotor bench` as the load.

    python benchmarks/disagg.py                       # every shape, both workloads (~5 min)
    python benchmarks/disagg.py --duration 30 --shapes 2agg 1p1d --workloads mix

Shapes: 2 agg workers against 1 prefill + 1 decode (`1p1d`), 4 agg against
1p3d and 2p2d; the disaggregated ones under each `--policies` (always,
isl_or_load). Workloads: `trace` (a Mooncake-format trace built by
`mooncake_trace.py`: shared system prompts, follow-up turns, 30 % long
prompts), replayed at its timestamps, `mix` (`rotor bench --mix`, long
8k-16k and short 0.1k-1k prompts, Poisson) and `short` (the short ones
alone). All send `--rate` requests/s per 2 workers for `--duration` seconds
(a trace per worker count). Each run has
a fresh cluster (cold caches, its own counters); prints one table and writes
every run's results under `--out`.

The cost model is a Llama-3.1-8B in bf16 on one H100 SXM, as vLLM runs it:
- prefill 0.04 ms a token (25k tokens/s: 16 GFLOP a token at ~40 % of the
  989 TFLOP/s bf16 peak), 3 ms a step that prefills (scheduling, launch);
- decode 7 ms a step at batch 1 (16 GB of weights read at ~3.35 TB/s is
  4.8 ms, plus launch and sampling), 0.1 ms for each further sequence (its
  KV reads at a few thousand tokens of context);
- 8192 tokens a step (vLLM's chunked-prefill budget on an 80 GB GPU), 256
  sequences, 26,000 blocks of 16 tokens (~55 GB of KV after the weights);
- KV 131,072 bytes a token (32 layers × 2 × 8 KV heads × 128 × 2 bytes),
  moved at 25 GB/s (one 200 Gb/s RDMA NIC per GPU): 16k tokens in ~86 ms.
So a 16k prompt's prefill is ~650 ms of compute: batched with decoding
streams (agg) it stalls each of them for two 8192-token chunks of ~330 ms.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mooncake_trace  # noqa: E402  (this directory's generator)

from rotor.bench import tokens  # noqa: E402
from rotor.model.builtin import builtin_test_model  # noqa: E402
from rotor.runtime.nats.server import command as nats_command  # noqa: E402

PY = sys.executable
MODEL = "mock-model"
COST = {
    "--speedup-ratio": "1",
    "--prefill-ms-per-token": "0.04",
    "--prefill-overhead-ms": "3",
    "--decode-ms-per-step": "7",
    "--decode-ms-per-seq": "0.1",
    "--max-num-batched-tokens": "8192",
    "--max-num-seqs": "256",
    "--block-size": "16",
    "--num-kv-blocks": "26000",
    "--kv-transfer-bandwidth": "25",
    "--kv-bytes-per-token": "131072",
}
SHAPES = {  # name: (prefill workers, decode workers, agg workers)
    "2agg": (0, 0, 2),
    "1p1d": (1, 1, 0),
    "4agg": (0, 0, 4),
    "1p3d": (1, 3, 0),
    "2p2d": (2, 2, 0),
}
MIXES = {  # workload: rotor bench --mix
    "mix": "long=8000:16000@0.3,short=100:1000",
    "short": "short=100:1000",  # where disaggregation has nothing to win
}
SLO = "ttft=2s,itl=50ms"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, check: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"not ready after {timeout:.0f} s: {what}")


def worker_flags() -> list[str]:
    """The cost model, less the flags this checkout's mocker does not have."""
    help_text = subprocess.run(
        [PY, "-m", "rotor.cli", "worker", "out=mocker", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    flags: list[str] = []
    for flag, value in COST.items():
        if flag in help_text:
            flags += [flag, value]
        else:
            print(f"warning: this mocker has no {flag}; its default is used", file=sys.stderr)
    return flags


@dataclass
class Cluster:
    """nats-server, the workers of one shape and one frontend."""

    shape: str
    policy: str
    logs: Path
    flags: list[str]

    def __post_init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.logs.mkdir(parents=True, exist_ok=True)
        nats_port = free_port()
        self.nats = f"nats://127.0.0.1:{nats_port}"
        self._spawn("nats", nats_command("127.0.0.1", nats_port, tempfile.mkdtemp()))
        wait_until("nats-server", lambda: _connects(nats_port))
        prefill, decode, agg = SHAPES[self.shape]
        roles = ["prefill"] * prefill + ["decode"] * decode + ["agg"] * agg
        for i, role in enumerate(roles):
            self._rotor(
                f"worker-{i}-{role}",
                "worker",
                "out=mocker",
                "--nats",
                self.nats,
                "--disaggregation-mode",
                role,
                *self.flags,
            )
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        front = ["frontend", "--nats", self.nats, "--port", str(port), "--router", "kv"]
        if self.policy != "-":  # POLICY or POLICY@MIN_TOKENS
            policy, _, min_tokens = self.policy.partition("@")
            front += ["--disagg-policy", policy]
            front += ["--disagg-min-tokens", min_tokens] if min_tokens else []
        self._rotor("frontend", *front)
        wait_until(f"{len(roles)} workers in /health", lambda: self._live() >= len(roles))

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))

    def _rotor(self, name: str, *args: str) -> None:
        self._spawn(name, [PY, "-m", "rotor.cli", *args])

    def _live(self) -> int:
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"a process exited ({p.args}); logs in {self.logs}")
        try:
            body = httpx.get(self.url + "/health", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return 0
        return len(body.get("workers", {}).get(MODEL, []))

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=10).text

    def close(self) -> None:
        """The frontend and workers first (they leave through NATS), then NATS."""
        nats, *rotor = self.procs
        for group in (rotor, [nats]):
            for p in group:
                p.terminate()
            for p in group:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


_SAMPLE = re.compile(r"^(\w+)(?:\{([^}]*)\})?\s+(\S+)$")


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """A metric's samples from Prometheus text: (labels, value)."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m[1] == name:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m[2] or ""))
            out.append((labels, float(m[3])))
    return out


def disagg_counts(text: str) -> dict[str, float]:
    """rotor_disagg_prefill_total by where (remote, local, refused) and reason."""
    out: dict[str, float] = {}
    for labels, v in samples(text, "rotor_disagg_prefill_total"):
        key = f"{labels.get('where')}:{labels.get('reason')}"
        out[key] = out.get(key, 0.0) + v
    return out


def handover(text: str) -> dict[str, float] | None:
    """The handover histogram's count, mean and p50/p99 (linear within buckets)."""
    buckets = sorted(
        (float(labels["le"]), v)
        for labels, v in samples(text, "rotor_disagg_handover_seconds_bucket")
    )
    count = sum(v for _, v in samples(text, "rotor_disagg_handover_seconds_count"))
    total = sum(v for _, v in samples(text, "rotor_disagg_handover_seconds_sum"))
    if not count:
        return None

    def quantile(q: float) -> float:
        rank, lo, below = q * count, 0.0, 0.0
        for le, cum in buckets:
            if cum >= rank:
                if math.isinf(le):
                    return lo
                return lo + (le - lo) * (rank - below) / max(cum - below, 1e-9)
            lo, below = le, cum
        return lo

    return {"count": count, "mean": total / count, "p50": quantile(0.5), "p99": quantile(0.99)}


def bench(url: str, out: Path, load: list[str], timeout: float) -> dict[str, Any]:
    cmd = [PY, "-m", "rotor.cli", "bench", "--url", url + "/v1", "--no-progress"]
    cmd += ["--output-dir", str(out), "--slo", SLO, "--warmup", "0", "--timeout", str(timeout)]
    subprocess.run(cmd + load, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "results.json").read_text())


def one_run(
    shape: str, policy: str, workload: str, a: argparse.Namespace, flags: list[str]
) -> dict[str, Any]:
    name = f"{workload}-{shape}-{policy if policy != '-' else 'agg'}"
    n_workers = sum(SHAPES[shape])
    tpw = f"{a.tokens_per_word:.4f}"
    rate = a.rate * n_workers / 2
    if workload == "trace":
        trace = a.out / f"trace-{n_workers}w.jsonl"
        if not trace.exists():  # one per worker count: the same structure, its own rate
            rows = mooncake_trace.generate(requests=max(1, round(rate * a.duration)), rate=rate)
            mooncake_trace.write(trace, rows)
        load = ["--trace", str(trace)]
    else:
        load = ["--mix", MIXES[workload], "--request-rate", f"{rate:g}"]
        load += ["--duration", str(a.duration), "--output-len", str(a.output_len), "--seed", "1"]
    load += ["--tokens-per-word", tpw]
    cluster = Cluster(shape, policy, a.out / name / "logs", flags)
    try:
        doc = bench(cluster.url, a.out / name, load, a.timeout)
        metrics = cluster.metrics()
    finally:
        cluster.close()
    s = doc["levels"][0]["summary"]
    counts = disagg_counts(metrics)
    remote = sum(v for k, v in counts.items() if k.startswith("remote:"))
    decided = sum(counts.values())
    return {
        "name": name,
        "workload": workload,
        "shape": shape,
        "policy": policy,
        "summary": s,
        "disagg": counts,
        "remote_share": remote / decided if decided else None,
        "handover_s": handover(metrics),
    }


def _ms(d: dict[str, Any] | None, key: str) -> str:
    return "-" if not d else f"{d[key]:.0f}"


def table(runs: list[dict[str, Any]]) -> str:
    head = (
        "| workload | shape | policy | ok | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | out tok/s "
        "| goodput req/s · tok/s (share) | remote | handover p50 · p99 (n) | lag p99 |"
    )
    lines = [head, "|" + "---|" * 13]
    for r in runs:
        s, g, h = r["summary"], r["summary"]["goodput"], r["handover_s"]
        remote = "-" if r["remote_share"] is None else f"{100 * r['remote_share']:.0f} %"
        hand = (
            "-" if not h else f"{1e3 * h['p50']:.0f} · {1e3 * h['p99']:.0f} ms ({h['count']:.0f})"
        )
        good = (
            f"{g['request_throughput']:.2f} · {g['output_throughput']:,.0f} ({g['fraction']:.0%})"
        )
        lines.append(
            f"| {r['workload']} | {r['shape']} | {r['policy']} | {s['completed']}/{s['requests']} "
            f"| {_ms(s['ttft_ms'], 'p50')} | {_ms(s['ttft_ms'], 'p99')} "
            f"| {s['itl_ms']['p50']:.1f} | {s['itl_ms']['p99']:.1f} | {s['output_throughput']:,.0f} "
            f"| {good} | {remote} | {hand} | {_ms(s['schedule_lag_ms'], 'p99')} |"
        )
    return "\n".join(lines) + "\n\nlatencies in ms; goodput at " + SLO


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", choices=tuple(SHAPES), default=list(SHAPES))
    p.add_argument(
        "--policies",
        nargs="+",
        default=["always", "isl_or_load"],
        help="--disagg-policy of each disaggregated run; POLICY@N adds --disagg-min-tokens N",
    )
    p.add_argument("--workloads", nargs="+", choices=("trace", *MIXES), default=["trace", *MIXES])
    p.add_argument("--duration", type=float, default=10.0, help="seconds of load a run")
    p.add_argument("--rate", type=float, default=3.0, help="requests/s per 2 workers")
    p.add_argument("--output-len", type=int, default=128, help="mix: max_tokens")
    p.add_argument("--timeout", type=float, default=120.0, help="per request")
    p.add_argument("--out", type=Path, default=Path("bench-results/disagg"))
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    # The mock model's tokenizer is known here: measure it as rotor bench would.
    _, tok = builtin_test_model()
    short, long = (tokens.keyed_words(f"calibration-0-{n}", n) for n in tokens.CALIBRATION_WORDS)
    extra = tokens.CALIBRATION_WORDS[1] - tokens.CALIBRATION_WORDS[0]
    a.tokens_per_word = (len(tok.encode(long)) - len(tok.encode(short))) / extra
    for old in a.out.glob("trace-*w.jsonl"):
        old.unlink()  # made again for this run's rate and duration
    flags = worker_flags()
    runs = []
    for workload in a.workloads:
        for shape in a.shapes:
            disagg = SHAPES[shape][0] > 0
            for policy in a.policies if disagg else ["-"]:
                t0 = time.monotonic()
                run = one_run(shape, policy, workload, a, flags)
                runs.append(run)
                print(f"{run['name']}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    (a.out / "summary.json").write_text(json.dumps(runs, indent=2))
    print(table(runs))
    print(f"\nresults: {a.out}/*/results.json, summary: {a.out / 'summary.json'}")


if __name__ == "__main__":
    main()
