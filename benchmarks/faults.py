"""Faults under load (issue 40): one fault applied to a real fleet while
clients stream through it, and what the clients saw.

Each run starts its own fleet, all real processes: a nats-server, 2 `rotor
frontend`s and 4 `rotor worker out=mocker --speedup-ratio 1` (a real
engine's pace). N clients (default 64) stream chat completions in a closed
loop, each answer the mocker's scripted story (so a migration's seam, a
repeated or missing piece, shows as a wrong answer), their requests going
round robin over the frontends that are up. At `--fault-at` seconds one
fault is applied:

    worker-kill     SIGKILL a worker
    frontend-kill   SIGKILL a frontend
    nats-restart    SIGKILL nats-server and start it again (same port, same store)
    wedge           wedge a worker's engine for --wedge-seconds (40: past its canary's
                    --canary-after 10 + --canary-timeout 5, and the frontends'
                    --request-timeout of 30 s): POST /debug/wedge {"seconds": S} on its
                    --system-port (the mocker's switch); an engine without the switch
                    answers 501 there, and the scenario says so
    drain           SIGTERM a worker (it finishes what it has, takes nothing new)

A client whose frontend is gone (it cannot connect, or the connection broke
mid-answer) retries that request once on the other frontend, as a client
behind a load balancer would; a frontend it could not connect to is out of
its rotation from then on. Nothing else is retried.

    python benchmarks/faults.py                              # every scenario, 3 runs each
    python benchmarks/faults.py worker-kill drain --runs 1 --clients 16

Per run: requests ok and failed at their first try (by cause: HTTP status,
connection error, incomplete stream, an error event in the stream, a wrong
answer), retried and how the retries ended, lost (failed for good), TTFT and
ITL before the fault and after it, the longest gap between two pieces of an
answer after it, and the recovery time: the first whole second after the
fault (counted from it) whose throughput (characters of answer received a
second) is back within 10 % of the seconds before it. Also the migrations
the surviving frontends counted, and how busy the machine was: its CPUs'
busy share during the run, and our processes' share of it. Markdown tables
go to stdout; everything, with every process's log, to the folder
bench-results/faults (under the current directory).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from rotor.bench.client import Measure, StreamError
from rotor.bench.http import Connections, Endpoint, HTTPError
from rotor.event_loop import run as run_loop
from rotor.runtime.nats.server import command as nats_command

PY = sys.executable
OUT = Path("bench-results/faults")
SCENARIOS = ("worker-kill", "frontend-kill", "nats-restart", "wedge", "drain")
MODEL = "mock-model"
# The answer every request asks the mocker for: ~130 tokens of the built-in
# model, 1.3 s at 10 ms a step.
STORY = " ".join(f"w{i}" for i in range(45))
RETRIED = ("connect", "connection_closed")  # the frontend is gone: try the other one
WORKER_LINE = re.compile(r"worker ([0-9a-f]+) serves")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the fleet ----------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    cmd: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(sig)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 20) -> None:
        if self.process is None:
            return
        if self.alive():
            self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Fleet:
    """A nats-server, the frontends and the workers, logs in `out`."""

    def __init__(
        self,
        out: Path,
        workers: int,
        frontends: int,
        worker_args: list[str],
        frontend_args: list[str],
    ) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.nats_port = free_port()
        self.nats_url = f"nats://127.0.0.1:{self.nats_port}"
        self.store = tempfile.mkdtemp(prefix="rotor-faults-nats-")
        self.nats = Proc(
            "nats", nats_command("127.0.0.1", self.nats_port, self.store), out / "nats.log"
        )
        self.system_urls: list[str] = []
        self.workers: list[Proc] = []
        for i in range(workers):
            port = free_port()
            self.system_urls.append(f"http://127.0.0.1:{port}")
            cmd = [PY, "-m", "rotor.cli", "worker", "--nats", self.nats_url, "out=mocker"]
            cmd += ["--speedup-ratio", "1", "--system-port", str(port), *worker_args]
            self.workers.append(Proc(f"worker{i}", cmd, out / f"worker{i}.log"))
        self.urls: list[str] = []
        self.frontends: list[Proc] = []
        for i in range(frontends):
            port = free_port()
            self.urls.append(f"http://127.0.0.1:{port}")
            cmd = [PY, "-m", "rotor.cli", "frontend", "--nats", self.nats_url]
            cmd += ["--port", str(port), *frontend_args]
            self.frontends.append(Proc(f"frontend{i}", cmd, out / f"frontend{i}.log"))

    @property
    def procs(self) -> list[Proc]:
        return [self.nats, *self.workers, *self.frontends]

    def start(self, timeout: float = 120) -> None:
        self.nats.start()
        wait(lambda: "Server is ready" in self.nats.log(), timeout, "nats-server")
        for p in (*self.workers, *self.frontends):
            p.start()
        for url in self.urls:
            wait(
                lambda u=url: len(live_workers(u)) == len(self.workers), timeout, f"{url}'s workers"
            )

    def worker_id(self, i: int) -> str:
        found = WORKER_LINE.search(self.workers[i].log())
        return found.group(1) if found else "?"

    def restart_nats(self) -> None:
        self.nats.signal(signal.SIGKILL)
        assert self.nats.process is not None
        self.nats.process.wait(10)
        self.nats.start()

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.signal(signal.SIGTERM)
        for p in reversed(self.procs):
            p.stop()


def wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (httpx.HTTPError, ValueError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def live_workers(url: str) -> list[str]:
    body = httpx.get(url + "/health", timeout=2).json()
    return [w["id"] for w in body.get("workers", {}).get(MODEL, [])]


def migrations(url: str) -> dict[str, float]:
    """A frontend's rotor_router_migrations_total by cause."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("rotor_router_migrations_total{"):
            key, _, value = line.rpartition(" ")
            cause = re.search(r'cause="([^"]*)"', key)
            name = cause.group(1) if cause else "?"
            out[name] = out.get(name, 0) + float(value)
    return out


# -- the machine ----------------------------------------------------------------------


def cpu_jiffies() -> tuple[int, int]:
    """(busy, all) jiffies of every CPU since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def proc_jiffies(pid: int) -> int:
    """user + system jiffies of a process and its waited-for children (0 once gone)."""
    try:
        parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return sum(int(x) for x in parts[11:15])


# -- the clients ------------------------------------------------------------------------


class Timed(Measure):
    """A measure that also keeps when each piece of the answer came, and its size."""

    __slots__ = ("marks",)

    def __init__(self) -> None:
        super().__init__("chat")
        self.marks: list[tuple[float, int]] = []

    def token(self, now: float) -> None:
        super().token(now)
        self.marks.append((now, len(self.text[-1]) if self.text else 0))


@dataclass
class Attempt:
    frontend: int
    start: float
    end: float = 0.0
    error: str | None = None  # the cause, None: a whole, right answer
    message: str = ""
    ttft: float | None = None
    marks: list[tuple[float, int]] = field(default_factory=list)
    output_tokens: int | None = None


@dataclass
class Request:
    first: Attempt
    retry: Attempt | None = None

    @property
    def lost(self) -> bool:
        last = self.retry or self.first
        return last.error is not None


class Balancer:
    """Round robin over the frontends that are up; one that refused a
    connection is out of the rotation from then on (a load balancer's
    health check would take it out too)."""

    def __init__(self, n: int) -> None:
        self.up = list(range(n))
        self.turn = 0

    def pick(self) -> int:
        self.turn += 1
        return self.up[self.turn % len(self.up)]

    def other(self, frontend: int) -> int | None:
        others = [f for f in self.up if f != frontend]
        return others[self.turn % len(others)] if others else None

    def down(self, frontend: int) -> None:
        if frontend in self.up and len(self.up) > 1:
            self.up.remove(frontend)


class Load:
    def __init__(self, urls: list[str], clients: int, timeout: float) -> None:
        self.connections = [Connections(Endpoint.parse(u + "/v1"), {}) for u in urls]
        self.clients = clients
        self.timeout = timeout
        self.balancer = Balancer(len(urls))
        self.requests: list[Request] = []
        self.in_flight = [0] * len(urls)
        self.origin = time.perf_counter()
        self.stopping = False
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Tell me a story"}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 1000,
            "mock": {"output": STORY},
        }
        self.body = orjson.dumps(body)

    async def attempt(self, frontend: int) -> Attempt:
        m = Timed()
        failure: list[bytes] = []
        a = Attempt(frontend, time.perf_counter() - self.origin)
        m.t0 = time.perf_counter()
        self.in_flight[frontend] += 1
        try:
            post = self.connections[frontend].post(
                "/chat/completions", self.body, m.on_body, failure.append
            )
            status = await asyncio.wait_for(post, self.timeout)
            if status != 200:
                a.error = f"http_{status}"
                a.message = b"".join(failure).decode(errors="replace")[:300]
            elif not m.done:
                a.error, a.message = "incomplete", "the stream ended before [DONE]"
            elif "".join(m.text) != STORY:
                a.error, a.message = "wrong_answer", "".join(m.text)[:300]
        except asyncio.TimeoutError:
            a.error, a.message = "timeout", f"no whole answer in {self.timeout} s"
        except HTTPError as e:
            a.error, a.message = e.kind, str(e)
        except StreamError as e:
            a.error, a.message = "stream_error", str(e)[:300]
        finally:
            self.in_flight[frontend] -= 1
        a.end = time.perf_counter() - self.origin
        a.ttft = m.ttft
        a.marks = [(t - self.origin, n) for t, n in m.marks]
        a.output_tokens = m.output_tokens
        return a

    async def client(self, end: float) -> None:
        while time.perf_counter() - self.origin < end and not self.stopping:
            frontend = self.balancer.pick()
            request = Request(await self.attempt(frontend))
            if request.first.error in RETRIED:
                if request.first.error == "connect":
                    self.balancer.down(frontend)
                other = self.balancer.other(frontend)
                if other is not None:
                    request.retry = await self.attempt(other)
            self.requests.append(request)

    async def run(self, end: float, fault_at: float, fault: Any) -> float:
        """The load until `end` s (then what is in flight finishes); the fault
        applied at `fault_at` s. The fault's time, in the load's seconds."""
        self.origin = time.perf_counter()
        tasks = [asyncio.create_task(self.client(end)) for _ in range(self.clients)]
        await asyncio.sleep(fault_at)
        fault_time = time.perf_counter() - self.origin
        self.at_fault = list(self.in_flight)
        await asyncio.to_thread(fault)
        await asyncio.gather(*tasks)
        for c in self.connections:
            c.close()
        return fault_time


# -- one run ---------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def summarize(load: Load, fault_time: float, warmup: float, after: float) -> dict[str, Any]:
    requests = load.requests
    attempts = [a for r in requests for a in (r.first, r.retry) if a is not None]
    first_errors: dict[str, int] = {}
    for r in requests:
        if r.first.error:
            first_errors[r.first.error] = first_errors.get(r.first.error, 0) + 1
    retried = [r for r in requests if r.retry is not None]
    lost: dict[str, int] = {}
    for r in requests:
        if r.lost:
            last = r.retry or r.first
            assert last.error is not None
            lost[last.error] = lost.get(last.error, 0) + 1

    def window(a: float, b: float) -> dict[str, Any]:
        ttft = [x.ttft for x in attempts if x.ttft is not None and a <= x.start < b]
        gaps = []
        for x in attempts:
            for (t0, _), (t1, _) in zip(x.marks, x.marks[1:], strict=False):
                if a <= t1 < b:
                    gaps.append(t1 - t0)
        return {
            "ttft_ms_p50": _ms(percentile(ttft, 50)),
            "ttft_ms_p99": _ms(percentile(ttft, 99)),
            "itl_ms_p50": _ms(percentile(gaps, 50)),
            "itl_ms_p99": _ms(percentile(gaps, 99)),
            "itl_ms_max": _ms(max(gaps)) if gaps else None,
        }

    # characters of answer received per second, from the fault's instant
    per_second: dict[int, int] = {}
    for x in attempts:
        for t, n in x.marks:
            k = int((t - fault_time) // 1)
            per_second[k] = per_second.get(k, 0) + n
    before_s = [per_second.get(k, 0) for k in range(-int(fault_time - warmup), 0)]
    before = statistics.mean(before_s) if before_s else 0.0
    after_s = [per_second.get(k, 0) for k in range(int(after))]
    recovery = next((k for k, v in enumerate(after_s) if v >= 0.9 * before), None)
    return {
        "requests": len(requests),
        "ok_first_try": sum(1 for r in requests if r.first.error is None),
        "failed_first_try": first_errors,
        "retried": len(retried),
        "retried_ok": sum(1 for r in retried if r.retry is not None and r.retry.error is None),
        "lost": lost,
        "examples": sorted(
            {
                f"{(r.retry or r.first).error}: {(r.retry or r.first).message[:160]}"
                for r in requests
                if r.lost
            }
        )[:5],
        "before": window(warmup, fault_time),
        "after": window(fault_time, fault_time + after),
        "throughput_before": before,
        "throughput_after": after_s,
        "lowest_after": min(after_s) / before if before and after_s else None,
        "recovery_s": recovery,
        "in_flight_at_fault": getattr(load, "at_fault", None),
    }


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1000.0


def wedge_available(url: str) -> str | None:
    """None when the worker has the wedge switch; else why not."""
    try:
        r = httpx.get(url + "/debug/wedge", timeout=5)  # asks; a POST would wedge it
    except httpx.HTTPError as e:
        return f"its --system-port did not answer: {e}"
    if r.status_code >= 400:
        return f"GET /debug/wedge answered {r.status_code}: {r.text[:200]}"
    return None


def one_run(scenario: str, run: int, args: argparse.Namespace) -> dict[str, Any]:
    out = OUT / f"{scenario}-{run}"
    if out.exists():
        for f in out.iterdir():
            f.unlink()
    fleet = Fleet(out, args.workers, args.frontends, args.worker_args, args.frontend_args)
    result: dict[str, Any] = {"scenario": scenario, "run": run}
    try:
        fleet.start()
        if scenario == "wedge":
            missing = wedge_available(fleet.system_urls[0])
            if missing is not None:
                result["not_available"] = missing
                return result
        target: dict[str, Any] = {}

        def fault() -> None:
            if scenario == "worker-kill":
                target["worker"] = fleet.worker_id(0)
                fleet.workers[0].signal(signal.SIGKILL)
            elif scenario == "drain":
                target["worker"] = fleet.worker_id(0)
                fleet.workers[0].signal(signal.SIGTERM)
            elif scenario == "frontend-kill":
                target["frontend"] = 1
                fleet.frontends[1].signal(signal.SIGKILL)
            elif scenario == "nats-restart":
                fleet.restart_nats()
            elif scenario == "wedge":
                target["worker"] = fleet.worker_id(0)
                r = httpx.post(
                    fleet.system_urls[0] + "/debug/wedge",
                    json={"seconds": args.wedge_seconds},
                    timeout=5,
                )
                target["wedge_status"] = r.status_code
            else:
                raise ValueError(scenario)

        ours = [p.pid for p in fleet.procs]
        load_avg = os.getloadavg()
        busy0, all0 = cpu_jiffies()
        mine0 = sum(proc_jiffies(p) for p in ours)
        self0 = sum(os.times()[:2])
        load = Load(fleet.urls, args.clients, args.timeout)
        after = args.after
        if scenario == "wedge":  # until the engine is back, and some
            after = max(after, args.wedge_seconds + 10)
        end = args.fault_at + after
        fault_time = run_loop(load.run(end, args.fault_at, fault))
        busy1, all1 = cpu_jiffies()
        mine1 = sum(proc_jiffies(p) for p in ours)
        self1 = sum(os.times()[:2])
        hz = os.sysconf("SC_CLK_TCK")
        ncpu = os.cpu_count() or 1
        total = (all1 - all0) or 1
        wall = total / hz / ncpu
        result.update(summarize(load, fault_time, args.warmup, after))
        result["target"] = target
        result["machine"] = {
            "cpus": ncpu,
            "busy": (busy1 - busy0) / total,
            "ours": ((mine1 - mine0) / hz + (self1 - self0)) / (wall * ncpu),
            "loadavg_before": load_avg,
            "loadavg_after": os.getloadavg(),
        }
        moved: dict[str, float] = {}
        for i, url in enumerate(fleet.urls):
            if fleet.frontends[i].alive():
                for cause, n in migrations(url).items():
                    moved[cause] = moved.get(cause, 0) + n
        result["migrations"] = moved
        result["log_lines"] = {
            p.name: [
                line
                for line in p.log().splitlines()
                if " ERROR " in line or "Traceback" in line or "response failed" in line
            ][:5]
            for p in fleet.procs
        }
    finally:
        fleet.stop()
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str))
    return result


# -- the report ---------------------------------------------------------------------------------


def fmt(x: float | None, digits: int = 0) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def causes(d: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(d.items())) or "0"


def table(scenario: str, results: list[dict[str, Any]], command: str) -> str:
    lines = [f"### {scenario}", "", f"`{command}`", ""]
    missing = [r for r in results if "not_available" in r]
    if missing:
        lines.append(f"not available yet: {missing[0]['not_available']}")
        return "\n".join(lines) + "\n"
    lines += [
        "| run | requests | in flight at the fault (per frontend) | failed at first try | retried → ok | lost | TTFT p50 / p99 ms before → after | ITL p50 / p99 ms before → after | longest gap after (ms) | recovery (s) | lowest second after | migrations | machine busy (ours) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        b, a = r["before"], r["after"]
        m = r["machine"]
        lines.append(
            f"| {r['run']} | {r['requests']} | {' + '.join(map(str, r['in_flight_at_fault'] or []))} "
            f"| {causes(r['failed_first_try'])} "
            f"| {r['retried']} → {r['retried_ok']} | {causes(r['lost'])} "
            f"| {fmt(b['ttft_ms_p50'])} / {fmt(b['ttft_ms_p99'])} → {fmt(a['ttft_ms_p50'])} / {fmt(a['ttft_ms_p99'])} "
            f"| {fmt(b['itl_ms_p50'], 1)} / {fmt(b['itl_ms_p99'], 1)} → {fmt(a['itl_ms_p50'], 1)} / {fmt(a['itl_ms_p99'], 1)} "
            f"| {fmt(a['itl_ms_max'])} | {fmt(r['recovery_s'])} "
            f"| {fmt(100 * r['lowest_after'] if r['lowest_after'] is not None else None)} % "
            f"| {causes({k: int(v) for k, v in r['migrations'].items()})} "
            f"| {100 * m['busy']:.0f} % ({100 * m['ours']:.0f} %) |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=", ".join(SCENARIOS))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--frontends", type=int, default=2)
    p.add_argument("--warmup", type=float, default=5.0, help="seconds before the before-window")
    p.add_argument("--fault-at", type=float, default=15.0, help="seconds into the load")
    p.add_argument("--after", type=float, default=20.0, help="seconds of load after the fault")
    p.add_argument(
        "--wedge-seconds",
        type=float,
        default=40.0,
        help="how long the wedge holds the engine (past its canary: --canary-after 10 + --canary-timeout 5)",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="a client's limit per request")
    p.add_argument("--worker-arg", dest="worker_args", action="append", default=[])
    p.add_argument("--frontend-arg", dest="frontend_args", action="append", default=[])
    args = p.parse_args()
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {unknown}: choose from {', '.join(SCENARIOS)}")
    command = "python benchmarks/faults.py " + " ".join(sys.argv[1:])
    report = []
    for scenario in args.scenarios or SCENARIOS:
        results = []
        for run in range(1, args.runs + 1):
            result = one_run(scenario, run, args)
            results.append(result)
            if "not_available" in result:
                print(f"{scenario}: not available yet ({result['not_available']})", flush=True)
                break
            print(
                f"{scenario} run {run}: {result['requests']} requests, "
                f"failed first {causes(result['failed_first_try'])}, "
                f"retried {result['retried']} → ok {result['retried_ok']}, lost {causes(result['lost'])}, "
                f"recovery {result['recovery_s']} s, busy {100 * result['machine']['busy']:.0f} %",
                flush=True,
            )
        report.append(table(scenario, results, command))
    text = "\n".join(report)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "report.md").write_text(text)
    print()
    print(text)


if __name__ == "__main__":
    main()
