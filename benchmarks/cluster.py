"""Benchmarks of the distributed runtime with `rotor bench` as the load:
a nats-server, N mocker workers, one or two frontends, all real processes.

    python benchmarks/cluster.py hop                # frontend+worker vs rotor run, CPU/token, TTFT
    python benchmarks/cluster.py hop-split          # the same at 32 streams, interleaved, per process
    python benchmarks/cluster.py scale              # throughput with 1, 2, 4 workers (and 2 frontends)
    python benchmarks/cluster.py kv                 # shared prefixes: kv vs round_robin routing
    python benchmarks/cluster.py kv-delay [ROUNDS]  # the same, the workers' KV events late
                                                    # (0, 200, 1000 ms), predicted routing off/on
    python benchmarks/cluster.py http-workers       # frontend --http-workers 1 vs 2, interleaved

Prints the `rotor bench` summaries it collected (results in bench-results/cluster-*).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from rotor.runtime.nats.server import command as nats_command

PY = sys.executable
OUT = Path("bench-results")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [PY, "-m", "rotor.cli", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def wait_health(url: str, workers: int = 0, model: str = "mock-model") -> None:
    for _ in range(1800):
        try:
            body = httpx.get(url + "/health", timeout=1).json()
            if len(body.get("workers", {}).get(model, [])) >= workers:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready")


def bench(url: str, pids: list[int], label: str, *args: str) -> dict:
    out = OUT / f"cluster-{label}"
    cmd = [
        PY, "-m", "rotor.cli", "bench", "--url", url + "/v1", "--no-progress",
        "--output-dir", str(out), "--label", label, "--server-pid", *map(str, pids), *args,
    ]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    results = json.loads((out / "results.json").read_text())
    return results


def summary(results: dict) -> list[str]:
    lines = []
    for level in results["levels"]:
        s = level["summary"]
        cpu = s.get("server_cpu") or {}
        answers = [r for r in level["requests"] if not r.get("error")]
        events = sum(len(r.get("itl_s") or []) + 1 for r in answers) / max(1, len(answers))
        lines.append(
            f"  c={level.get('concurrency')}: {s['request_throughput']:.1f} req/s, "
            f"{s['output_throughput']:.0f} tok/s, TTFT p50 {s['ttft_ms']['p50']:.2f} ms "
            f"p90 {s['ttft_ms']['p90']:.2f} ms, CPU {cpu.get('us_per_output_token', 0):.1f} µs/token, "
            f"cache hit {s.get('cache_hit_ratio', 0):.1%}, {events:.0f} events per answer"
        )
    return lines


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


class Cluster:
    def __init__(
        self,
        workers: int,
        frontends: int = 1,
        worker_args: tuple[str, ...] = (),
        frontend_args: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = [
            subprocess.Popen(
                nats_command("127.0.0.1", self.port, tempfile.mkdtemp()),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        ]
        time.sleep(0.5)
        self.workers = [spawn("worker", "--nats", self.url, *worker_args) for _ in range(workers)]
        self.frontends = []
        for _ in range(frontends):
            port = free_port()
            self.frontends.append(
                (
                    f"http://127.0.0.1:{port}",
                    spawn("frontend", "--nats", self.url, "--port", str(port), *frontend_args),
                )
            )
        self.procs += self.workers + [p for _, p in self.frontends]
        for url, _ in self.frontends:
            wait_health(url, workers)

    @property
    def pids(self) -> list[int]:
        """Every server process: nats-server, workers, frontends and their HTTP processes."""
        fronts = [p.pid for _, p in self.frontends]
        workers = [p.pid for p in self.workers]
        return [self.procs[0].pid, *workers, *fronts, *(c for f in fronts for c in children(f))]

    def close(self) -> None:
        """Frontends and workers first, then nats-server (a worker leaving
        withdraws its lease there); a process that does not end in 20 s is
        killed, so the next run starts clean."""
        nats, rest = self.procs[0], self.procs[1:]
        for p in reversed(rest):
            p.terminate()
        for p in rest:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                print(f"  (pid {p.pid} did not stop in 20 s: killed)", file=sys.stderr)
                p.kill()
                p.wait()
        nats.terminate()
        nats.wait(20)


LOAD = ("--input-len", "160", "--output-len", "128", "--num-requests", "256")


def hop() -> None:
    """One process and frontend + worker over NATS, with the mocker's default
    slices and a step at a time (`--step-slice-ms 0`)."""
    for slice_ms in ("1", "0"):
        mocker = ("out=mocker", "--speedup-ratio", "0", "--step-slice-ms", slice_ms)
        port = free_port()
        single = spawn("run", *mocker, "--port", str(port))
        url = f"http://127.0.0.1:{port}"
        wait_health(url)
        try:
            print(f"rotor run (one process), --step-slice-ms {slice_ms}:")
            for line in summary(
                bench(url, [single.pid], "run", "--concurrency", "1", "32", "128", *LOAD)
            ):
                print(line)
        finally:
            single.terminate()
            single.wait()
        c = Cluster(1, worker_args=mocker)
        try:
            print(f"frontend + worker over NATS, --step-slice-ms {slice_ms}:")
            for line in summary(
                bench(c.frontends[0][0], c.pids, "hop", "--concurrency", "1", "32", "128", *LOAD)
            ):
                print(line)
        finally:
            c.close()


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _split(url: str, names: dict[int, str], label: str) -> float:
    """CPU µs per token of each named process under 32 streams, printed; the total."""
    load = ("--concurrency", "32", "--input-len", "160", "--output-len", "128")
    tag = "split-" + label.replace(" ", "-")
    bench(url, list(names), f"{tag}-warm", *load, "--num-requests", "128")
    before = {pid: _cpu_s(pid) for pid in names}
    level = bench(url, list(names), tag, *load, "--num-requests", "768")["levels"][0]
    after = {pid: _cpu_s(pid) for pid in names}
    answers = [r for r in level["requests"] if not r.get("error")]
    tokens = sum(r.get("output_tokens", 0) for r in answers)
    events = sum(len(r.get("itl_s") or []) + 1 for r in answers) / max(1, len(answers))
    parts = {name: 1e6 * (after[pid] - before[pid]) / tokens for pid, name in names.items()}
    total = sum(parts.values())
    each = ", ".join(f"{name} {us:.1f}" for name, us in parts.items())
    print(
        f"  {label}: {level['summary']['request_throughput']:.0f} req/s, {events:.0f} events "
        f"per answer, {total:.1f} µs/token ({each})"
    )
    return total


def hop_split() -> None:
    """One process against frontend + worker over NATS at 32 streams, two
    interleaved rounds, each process's CPU per token (nats-server's too)."""
    for slice_ms in ("0", "1"):
        mocker = ("out=mocker", "--speedup-ratio", "0", "--step-slice-ms", slice_ms)
        print(f"--step-slice-ms {slice_ms}:")
        for round_ in (1, 2):
            port = free_port()
            single = spawn("run", *mocker, "--port", str(port))
            try:
                wait_health(f"http://127.0.0.1:{port}")
                one = _split(f"http://127.0.0.1:{port}", {single.pid: "process"}, "one process")
            finally:
                single.terminate()
                single.wait()
            c = Cluster(1, worker_args=mocker)
            try:
                names = {c.procs[0].pid: "nats-server", c.workers[0].pid: "worker"}
                names[c.frontends[0][1].pid] = "frontend"
                hop = _split(c.frontends[0][0], names, "over NATS")
            finally:
                c.close()
            print(f"  round {round_}: over NATS / one process = {hop / one:.2f}")


def scale() -> None:
    mocker = ("out=mocker", "--speedup-ratio", "1")
    for workers, frontends in ((1, 1), (2, 1), (4, 1), (4, 2)):
        c = Cluster(workers, frontends, worker_args=mocker)
        try:
            print(f"{workers} worker(s), {frontends} frontend(s), 64 streams in all:")
            # Each frontend gets its share of the streams, all at once.
            per = str(64 // frontends)
            runs = [
                subprocess.Popen(
                    [
                        PY,
                        "-m",
                        "rotor.cli",
                        "bench",
                        "--url",
                        url + "/v1",
                        "--no-progress",
                        "--output-dir",
                        str(OUT / f"cluster-scale-{workers}w{frontends}f{i}"),
                        "--server-pid",
                        *map(str, c.pids),
                        "--concurrency",
                        per,
                        *LOAD,
                    ],  # fmt: skip
                    stdout=subprocess.DEVNULL,
                )
                for i, (url, _) in enumerate(c.frontends)
            ]
            for run in runs:
                run.wait()
            total = 0.0
            for i in range(frontends):
                results = json.loads(
                    (OUT / f"cluster-scale-{workers}w{frontends}f{i}" / "results.json").read_text()
                )
                total += results["levels"][0]["summary"]["request_throughput"]
                for line in summary(results):
                    print(f"  frontend {i}:{line}")
            print(f"  together: {total:.1f} req/s")
        finally:
            c.close()


# 16 prefixes of ~1450 tokens (300 words of the test tokenizer); each worker holds ~5.
KV_WORKER = ("out=mocker", "--speedup-ratio", "1", "--num-kv-blocks", "560")
KV_LOAD = (
    "--shared-prefix", "16x300", "--input-len", "308", "--output-len", "32",
    "--num-requests", "128", "--concurrency", "8", "--seed", "1", "--warmup", "0",
)  # fmt: skip


def kv_run(label: str, worker_args: tuple[str, ...], frontend_args: tuple[str, ...]) -> float:
    """The shared-prefix load on 4 workers: its summary printed, its cache hit ratio."""
    c = Cluster(4, worker_args=KV_WORKER + worker_args, frontend_args=frontend_args)
    try:
        results = bench(c.frontends[0][0], c.pids, label, *KV_LOAD)
        print(f"{label}:")
        for line in summary(results):
            print(line)
        per: dict[str, int] = {}
        tiers: dict[str, int] = {}
        m = httpx.get(c.frontends[0][0] + "/metrics").text
        for line in m.splitlines():
            value = int(float(line.rsplit(" ", 1)[1])) if not line.startswith("#") else 0
            if line.startswith("rotor_router_decisions_total{"):
                per[line.split('worker="')[1].split('"')[0]] = value
            elif line.startswith("rotor_router_kv_tier_blocks_total{"):
                medium = line.split('medium="')[1].split('"')[0]
                tiers[medium] = tiers.get(medium, 0) + value
        print("  requests per worker:", sorted(per.values()))
        if tiers:
            print("  overlap blocks by where they sat:", tiers)
        return float(results["levels"][0]["summary"].get("cache_hit_ratio", 0))
    finally:
        c.close()


def kv() -> None:
    for router in ("round_robin", "kv"):
        kv_run(f"kv-{router}", (), ("--router", router))


def kv_delay(rounds: int = 1) -> None:
    """`--router kv` with the workers' KV events held back 0, 200 and 1000 ms
    (`--kv-events-delay-ms`), predicted routing off (`--router-predicted-ttl
    0`) and on (its default); rounds interleaved, so a busy machine spreads
    over every setting. Prints each setting's hit ratios and their median."""
    ratios: dict[tuple[int, str], list[float]] = {}
    for r in range(rounds):
        for delay in (0, 200, 1000):
            for predicted in ("off", "on"):
                ttl = ("--router-predicted-ttl", "0") if predicted == "off" else ()
                label = f"kv-delay{delay}-predicted-{predicted}-round{r}"
                hit = kv_run(label, ("--kv-events-delay-ms", str(delay)), ("--router", "kv", *ttl))
                ratios.setdefault((delay, predicted), []).append(hit)
    print("\nKV events late by | predicted routing | cache hit ratio (median [each round])")
    for (delay, predicted), hits in ratios.items():
        each = ", ".join(f"{h:.3f}" for h in hits)
        print(f"{delay} ms | {predicted} | {statistics.median(hits):.3f} [{each}]")


def http_workers() -> None:
    """One frontend with 1 or 2 HTTP processes, one mocker worker; rounds
    interleaved (1, 2, 1, 2) so a busy machine spreads over both."""
    mocker = ("out=mocker", "--speedup-ratio", "0")
    for i, n in enumerate((1, 2, 1, 2)):
        c = Cluster(1, worker_args=mocker, frontend_args=("--http-workers", str(n)))
        try:
            time.sleep(2)  # every HTTP process has found the worker
            label = f"http-workers-{n}-round{i}"
            results = bench(c.frontends[0][0], c.pids, label, "--concurrency", "32", "128", *LOAD)
            print(f"--http-workers {n} (round {i}, {len(c.pids)} server processes):")
            for line in summary(results):
                print(line)
        finally:
            c.close()


if __name__ == "__main__":
    modes = {"hop": hop, "hop-split": hop_split, "scale": scale, "kv": kv}
    modes["http-workers"] = http_workers
    if sys.argv[1] == "kv-delay":
        kv_delay(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    else:
        modes[sys.argv[1]]()
