"""`rotor planner` against fixed fleets on one rising-and-falling load, all
real processes: a nats-server, `rotor frontend`, mocker workers at
`--speedup-ratio 1` with disagg.py's H100 cost model, and `rotor bench`
stages of open-loop Poisson rates as the load.

    python benchmarks/planner.py                      # ~3 × 5 min
    python benchmarks/planner.py --rates 1 4 8 4 1 --stage 30 --fleets planner

Fleets: `min` (fixed at --min-workers), `max` (fixed at --max-workers) and
`planner` (rotor planner, local connector, min..max). For each: SLA
attainment (requests whose TTFT ≤ --ttft and mean ITL ≤ --itl, of all
sent), worker-seconds over the load, requests lost, and the planner's scale
actions with their time since the load began.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from disagg import PY, _connects, free_port, wait_until, worker_flags  # noqa: E402

from rotor.runtime.nats.server import command as nats_command  # noqa: E402

MODEL = "mock-model"


class Fleet:
    def __init__(self, kind: str, a: argparse.Namespace, logs: Path, flags: list[str]) -> None:
        self.procs: list[subprocess.Popen] = []
        self.logs = logs
        logs.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.nats = f"nats://127.0.0.1:{port}"
        self._spawn("nats", nats_command("127.0.0.1", port, tempfile.mkdtemp()))
        wait_until("nats-server", lambda: _connects(port))
        web = free_port()
        self.url = f"http://127.0.0.1:{web}"
        self._spawn("frontend", [PY, "-m", "rotor.cli", "frontend", "--nats", self.nats,
                                 "--port", str(web), "--router", "kv"])  # fmt: skip
        worker = [PY, "-m", "rotor.cli", "worker", "out=mocker", "--nats", self.nats, *flags]
        self.planner_url: str | None = None
        if kind == "planner":
            sys_port = free_port()
            self.planner_url = f"http://127.0.0.1:{sys_port}"
            self._spawn("planner", [
                PY, "-m", "rotor.cli", "planner", "--nats", self.nats, "--model", MODEL,
                "--ttft", str(a.ttft), "--itl", str(a.itl), "--interval", str(a.interval),
                "--min-workers", str(a.min_workers), "--max-workers", str(a.max_workers),
                "--cooldown", str(a.cooldown), "--down-intervals", str(a.down_intervals),
                "--system-port", str(sys_port), "--log-format", "json",
                "--worker-cmd", shlex.join(worker),
            ])  # fmt: skip
            self.fixed = a.min_workers
        else:
            self.fixed = a.min_workers if kind == "min" else a.max_workers
            for i in range(self.fixed):
                self._spawn(f"worker-{i}", worker)
        wait_until(f"{self.fixed} workers", lambda: self.live() >= self.fixed)

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))

    def live(self) -> int:
        try:
            body = httpx.get(self.url + "/health", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return 0
        return len(body.get("workers", {}).get(MODEL, []))

    def close(self) -> None:
        nats, *rest = self.procs
        for group in (rest[::-1], [nats]):  # the planner first: it drains its workers
            for p in group:
                p.terminate()
                try:
                    p.wait(90)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def sample_workers(fleet: Fleet, stop: threading.Event, out: list[tuple[float, int]]) -> None:
    t0 = time.monotonic()
    while not stop.wait(1.0):
        out.append((time.monotonic() - t0, fleet.live()))


def actions(log: Path, t0_wall: float) -> list[str]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        fields = rec.get("fields") or rec
        if fields.get("action") in ("up", "down"):
            ts = time.mktime(time.strptime(rec["ts"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
            out.append(
                f"{ts - t0_wall:+.0f}s {fields['action']} {fields['live']}→{fields['target']}"
            )
    return out


def run(kind: str, a: argparse.Namespace, flags: list[str]) -> dict[str, Any]:
    fleet = Fleet(kind, a, a.out / kind / "logs", flags)
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    try:
        t0 = time.time()
        sampler = threading.Thread(target=sample_workers, args=(fleet, stop, samples))
        sampler.start()
        cmd = [PY, "-m", "rotor.cli", "bench", "--url", fleet.url + "/v1", "--no-progress",
               "--output-dir", str(a.out / kind), "--warmup", "0", "--seed", "1",
               "--request-rate", *map(str, a.rates), "--duration", str(a.stage),
               "--input-len", str(a.input_len), "--output-len", str(a.output_len)]  # fmt: skip
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        stop.set()
        sampler.join()
    finally:
        stop.set()
        fleet.close()
    doc = json.loads((a.out / kind / "results.json").read_text())
    reqs = [r for lv in doc["levels"] for r in lv["requests"]]
    good = 0
    for r in reqs:
        if r["error"] or r["ttft_s"] is None:
            continue
        itl = sum(r["itl_s"]) / len(r["itl_s"]) if r["itl_s"] else 0.0
        good += r["ttft_s"] <= a.ttft and itl <= a.itl
    span = samples[-1][0] if samples else 0.0
    worker_s = sum(n for _, n in samples)  # one sample a second
    planner_log = a.out / kind / "logs" / "planner.log"
    return {
        "fleet": kind,
        "requests": len(reqs),
        "lost": sum(1 for r in reqs if r["error"]),
        "attainment": good / len(reqs) if reqs else 0.0,
        "worker_seconds": worker_s,
        "seconds": span,
        "actions": actions(planner_log, t0) if planner_log.exists() else [],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rates", type=float, nargs="+", default=[1, 3, 6, 9, 6, 3, 1])
    p.add_argument("--stage", type=float, default=45.0, help="seconds per rate")
    p.add_argument("--fleets", nargs="+", default=["min", "max", "planner"])
    p.add_argument("--min-workers", type=int, default=1)
    p.add_argument("--max-workers", type=int, default=4)
    p.add_argument("--ttft", type=float, default=0.5)
    p.add_argument("--itl", type=float, default=0.05)
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--cooldown", type=float, default=30.0)
    p.add_argument("--down-intervals", type=int, default=3)
    p.add_argument("--input-len", type=int, default=3000)
    p.add_argument("--output-len", type=int, default=150)
    p.add_argument("--out", type=Path, default=Path("planner-bench"))
    a = p.parse_args()
    flags = worker_flags()
    rows = [run(kind, a, flags) for kind in a.fleets]
    (a.out / "summary.json").write_text(json.dumps(rows, indent=1))
    print(f"{'fleet':8} {'requests':>8} {'lost':>5} {'SLA met':>8} {'worker-s':>9}  actions")
    for r in rows:
        print(f"{r['fleet']:8} {r['requests']:8} {r['lost']:5} {r['attainment']:8.1%} "
              f"{r['worker_seconds']:9.0f}  {'; '.join(r['actions'])}")  # fmt: skip


if __name__ == "__main__":
    main()
