"""`rotor planner` end to end: a real nats-server, a real frontend, and
mocker workers that the planner's local connector starts and drains.

The mocker runs at real speed with a heavy prefill, so a burst of requests
misses a tight TTFT target: the planner must add a worker, then remove one
(drained: every stream completes) once the load is gone, and take its
workers with it when told to leave."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from openai import AsyncOpenAI

from support.cluster import Proc, _spawn, nats_server, start_frontend
from support.server import free_port
from support.wait import wait_for

pytestmark = pytest.mark.e2e

WORKER = (
    f"{sys.executable} -m rotor.cli worker out=mocker --speedup-ratio 1 "
    "--prefill-ms-per-token 0.5 --prefill-overhead-ms 20 --decode-ms-per-step 5 --grace-period 20"
)


def _planner(nats_url: str, *extra: str) -> tuple[Proc, str]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "rotor.cli", "planner", "--nats", nats_url,
        "--model", "mock-model", "--ttft", "0.1", "--itl", "1", "--interval", "0.5",
        "--min-workers", "1", "--max-workers", "2", "--cooldown", "2",
        "--down-intervals", "2", "--settle-timeout", "60", "--drain-timeout", "30",
        "--system-port", str(port), "--worker-cmd", WORKER, *extra,
    ]  # fmt: skip
    return _spawn(cmd), f"http://127.0.0.1:{port}"


def _metric(url: str, name: str, pool: str = "agg", action: str | None = None) -> float:
    try:
        text = httpx.get(url + "/metrics", timeout=2).text
    except httpx.HTTPError:
        return -1.0
    for line in text.splitlines():
        labels_match = f'pool="{pool}"' in line and (action is None or f'action="{action}"' in line)
        if line.startswith(name + "{") and labels_match:
            return float(line.rpartition(" ")[2])
    return 0.0


def _worker_pids(planner: Proc) -> set[int]:
    """The planner's worker processes: its children running `rotor worker`."""
    out = subprocess.run(
        ["pgrep", "-P", str(planner.process.pid), "-f", "rotor.cli worker"], capture_output=True
    )
    return {int(p) for p in out.stdout.split()}


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.add(pid)
    return alive


def _active(url: str) -> int:
    """Requests the model's workers hold now, as the frontend's /health adds them up."""
    return httpx.get(url + "/health", timeout=5).json()["engines"]["mock-model"]["active_requests"]


@pytest.fixture(scope="module")
def cluster():
    with nats_server() as nats:
        frontend = start_frontend(nats, "--router", "least_loaded")
        try:
            yield nats, frontend
        finally:
            frontend.proc.stop()


async def _burst(url: str, n: int, words: int = 300, max_tokens: int = 40) -> list[str]:
    """`n` streamed answers at once: their finish reasons."""
    client = AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)

    async def one(i: int) -> str:
        stream = await client.chat.completions.create(
            model="mock-model",
            messages=[{"role": "user", "content": f"question {i} " + "word " * words}],
            max_tokens=max_tokens,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        finish = ""
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        return finish

    return await asyncio.gather(*(one(i) for i in range(n)))


def test_scales_up_under_load_down_after_it_and_leaves_nothing(cluster) -> None:
    nats, frontend = cluster
    planner, url = _planner(nats.url)
    try:
        # the minimum at once: one worker, registered with the frontend
        wait_for("one worker", lambda: len(frontend.workers("mock-model")) == 1, 60, planner.text)
        wait_for(
            "the planner to see it", lambda: _metric(url, "rotor_planner_live_workers") == 1, 10
        )
        # a burst misses the 0.1 s TTFT target: a second worker, never a third (--max-workers)
        finishes = asyncio.run(_burst(frontend.url, 24))
        assert finishes == ["length"] * 24
        wait_for("a second worker", lambda: len(frontend.workers("mock-model")) == 2, 60,
                 planner.text)  # fmt: skip
        assert _metric(url, "rotor_planner_decisions_total", action="up") >= 1
        # streams running on the worker that is drained still complete
        finishes = asyncio.run(_burst(frontend.url, 4))
        assert finishes == ["length"] * 4
        # idle: back to the minimum, by draining one worker
        wait_for("back to one worker", lambda: len(frontend.workers("mock-model")) == 1, 60,
                 planner.text)  # fmt: skip
        assert _metric(url, "rotor_planner_decisions_total", action="down") >= 1
        assert 1 <= _metric(url, "rotor_planner_target_workers") <= 2  # --min/--max-workers
        started = _worker_pids(planner)
        assert started  # the one serving (and maybe the one still draining)
        # the planner leaves while answers stream: its workers drain, and finish them
        with ThreadPoolExecutor(1) as pool:
            streams = pool.submit(asyncio.run, _burst(frontend.url, 3, 1, max_tokens=300))
            wait_for("three answers streaming", lambda: _active(frontend.url) == 3, 30)
            planner.process.send_signal(signal.SIGTERM)
            assert streams.result(60) == ["length"] * 3
    finally:
        planner.process.send_signal(signal.SIGTERM)
        code = planner.process.wait(60)
    assert code == 0, planner.text()
    # the planner's workers went with it
    wait_for("no worker left", lambda: not _alive(started), 30)
    wait_for("no worker registered", lambda: not frontend.workers("mock-model"), 30)
    log = planner.text()
    assert "agg up 1→2" in log and "agg down 2→1" in log
    planner.log.close()


def _roles(url: str) -> list[str]:
    workers = httpx.get(url + "/health", timeout=5).json().get("workers", {})
    return sorted(w["role"] for w in workers.get("mock-model", []))


def test_disagg_sizes_the_prefill_and_decode_pools_apart(cluster) -> None:
    """--mode disagg: one prefill and one decode worker to begin with; prompts
    whose prefill alone misses the TTFT target grow the prefill pool only
    (decode is far inside --itl), and idle shrinks it back."""
    nats, _ = cluster
    frontend = start_frontend(nats, "--disagg-policy", "always", "--router", "kv")
    planner, url = _planner(nats.url, "--mode", "disagg")
    try:
        wait_for("a worker per pool", lambda: _roles(frontend.url) == ["decode", "prefill"], 60,
                 planner.text)  # fmt: skip
        for pool in ("prefill", "decode"):
            wait_for(f"{pool} seen", lambda p=pool: _metric(url, "rotor_planner_live_workers", p) == 1,
                     10)  # fmt: skip
        assert asyncio.run(_burst(frontend.url, 12)) == ["length"] * 12
        wait_for("a second prefill worker",
                 lambda: _roles(frontend.url) == ["decode", "prefill", "prefill"], 60,
                 planner.text)  # fmt: skip
        remote = [  # the burst was prefilled on the prefill pool
            float(line.rpartition(" ")[2])
            for line in httpx.get(frontend.url + "/metrics", timeout=5).text.splitlines()
            if line.startswith("rotor_disagg_prefill_total{") and 'where="remote"' in line
        ]
        assert sum(remote) >= 12
        wait_for("back to one prefill worker",
                 lambda: _roles(frontend.url) == ["decode", "prefill"], 60,
                 planner.text)  # fmt: skip
        log = planner.text()
        assert "prefill up 1→2" in log and "prefill down 2→1" in log
        assert "decode up 1→2" not in log  # sized apart: decode met its target
        assert _metric(url, "rotor_planner_decisions_total", "decode", "up") == 1  # its 0→1
    finally:
        planner.process.send_signal(signal.SIGTERM)
        code = planner.process.wait(60)
        frontend.proc.stop()
    assert code == 0, planner.text()
    planner.log.close()


def test_dry_run_changes_nothing(cluster) -> None:
    nats, _ = cluster
    planner, url = _planner(nats.url, "--dry-run")
    try:
        wait_for("a dry-run decision", lambda: "[dry run] agg up 0→1" in planner.text(), 30)
        assert not _worker_pids(planner)
    finally:
        planner.stop()


def test_a_worker_command_that_fails_is_retried_and_reported(cluster) -> None:
    nats, _ = cluster
    port = free_port()
    cmd = [
        sys.executable, "-m", "rotor.cli", "planner", "--nats", nats.url,
        "--model", "mock-model", "--interval", "0.5", "--system-port", str(port),
        "--worker-cmd", f"{sys.executable} -c 'import sys; sys.exit(3)'",
    ]  # fmt: skip
    planner = _spawn(cmd)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("two failures", lambda: _metric(url, "rotor_planner_worker_failures_total") >= 2,
                 60, planner.text)  # fmt: skip
        assert "exit" in planner.text() and "3" in planner.text()
    finally:
        planner.stop()
