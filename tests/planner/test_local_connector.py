"""The `local` connector against real processes: `rotor worker out=echo`
children registering on a real nats-server, cheap Python children for
failures and signals, and a planner process SIGKILLed for real."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nats as nats_py
import pytest
from nats.js.errors import NoKeysError
from openai import AsyncOpenAI

from rotor.planner.connectors import ConnectorError
from rotor.planner.connectors.local import Backoff, LocalConnector, format_command
from rotor.planner.observation import WorkerLoad
from rotor.protocol.lease import Lease
from rotor.runtime.nats import subjects

from support.cluster import WORKER_LINE, Nats, nats_server, start_frontend
from support.wait import wait_for, wait_for_async

ECHO = [sys.executable, "-m", "rotor.cli", "worker", "out=echo"]
MOCKER = [  # real pace: a 400-token answer takes 2 s
    sys.executable, "-m", "rotor.cli", "worker", "out=mocker", "--speedup-ratio", "1",
    "--decode-ms-per-step", "5",
]  # fmt: skip
FAST = {"ROTOR_ECHO_DELAY_MS": "0"}
NO_NATS = "nats://127.0.0.1:1"  # children that never connect
SLEEPER = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(600)"]
DEAF = [  # ignores SIGTERM: only SIGKILL ends it
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(600)",
]
FAILS = [sys.executable, "-c", "print('boom: no model here', flush=True); import sys; sys.exit(3)"]


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an orphan init may reap late)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def reaped(pid: int) -> bool:
    """No zombie of ours left: waitpid knows no such child any more."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def text(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def logs(connector: LocalConnector) -> str:
    """Every child's log, for a timeout's message."""
    folder = connector.log_dir
    if folder is None:
        return "(no logs)"
    return "\n".join(
        f"== {p.name}\n{p.read_text(errors='replace')}" for p in Path(folder).iterdir()
    )


async def leases(url: str) -> list[Lease]:
    nc = await nats_py.connect(url)
    try:
        kv = await nc.jetstream().key_value(subjects.WORKERS_BUCKET)
        found = []
        try:
            keys = await kv.keys()
        except NoKeysError:
            return []
        for key in keys:
            entry = await kv.get(key)
            found.append(Lease.decode(entry.value or b""))
        return found
    finally:
        await nc.close()


def pid_of(lease: Lease) -> int:
    return int(lease.address.rpartition(":")[2])


async def test_workers_register_and_drain_stops_the_one_it_names(
    nats: Nats, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "rotor.planner")
    connector = LocalConnector({"decode": ECHO}, nats.url, grace_period=5, env=FAST)
    await connector.start()
    try:
        await connector.scale("decode", 2, [])
        assert await connector.replicas("decode") == 2
        older, younger = connector.workers("decode")
        await wait_for_async(
            "both workers to register",
            lambda: all(WORKER_LINE.search(text(w.log_path).encode()) for w in (older, younger)),
            60,
            lambda: logs(connector),
        )
        ours = {pid_of(lease): lease for lease in await leases(nats.url)}
        assert {older.pid, younger.pid} <= set(ours)
        assert ours[older.pid].role == ours[younger.pid].role == "decode"  # the pool's env

        # the older one: with drain ignored, the youngest would go instead
        lease = ours[older.pid]
        await connector.scale("decode", 1, [WorkerLoad(lease.worker_id, "decode", lease.address)])
        assert await connector.replicas("decode") == 1
        await wait_for_async(
            "the drained worker to exit",
            lambda: [w.pid for w in connector.workers("decode")] == [younger.pid],
            5,  # its grace period
            lambda: logs(connector),
        )
        assert f"pid {older.pid} left (exit code 0)" in caplog.text
        assert "is leaving" in text(older.log_path)  # SIGTERM: it drained
        assert alive(younger.pid) and not alive(older.pid)
        assert connector.failures("decode") == 0
    finally:
        await connector.stop()
    assert not alive(younger.pid)
    assert reaped(younger.pid) and reaped(older.pid)
    assert connector.workers("decode") == []


async def _stream(client: AsyncOpenAI, i: int, max_tokens: int) -> tuple[str, int]:
    """One streamed chat answer: its finish reason and its completion tokens."""
    stream = await client.chat.completions.create(
        model="mock-model",
        messages=[{"role": "user", "content": f"stream {i}"}],
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    finish, tokens = "", 0
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return finish, tokens


async def test_a_drained_worker_finishes_every_stream_it_holds(nats: Nats) -> None:
    """Scale-down while answers stream from the worker it drains: every one
    of them ends whole ("length", all its tokens), then the worker exits 0.
    No migration: a stream cut by the drain would fail, not move."""
    connector = LocalConnector({"agg": MOCKER}, nats.url, grace_period=30)
    frontend = start_frontend(nats, "--router", "least_loaded", "--migration-limit", "0")
    await connector.start()
    try:
        await connector.scale("agg", 2, [])
        await wait_for_async(
            "two workers", lambda: len(frontend.workers("mock-model")) == 2, 60,
            lambda: logs(connector),
        )  # fmt: skip
        client = AsyncOpenAI(base_url=frontend.url + "/v1", api_key="x", max_retries=0)
        # 6 s each at the mocker's pace: still streaming when a loaded machine's
        # leases say both workers run them (2 s answers ended first once in CI)
        streams = [asyncio.create_task(_stream(client, i, 1200)) for i in range(6)]
        ours: dict[int, Lease] = {}
        for _ in range(500):  # until both workers report streams running
            ours = {pid_of(lease): lease for lease in await leases(nats.url)}
            if len(ours) == 2 and all(lease.state.running > 0 for lease in ours.values()):
                break
            await asyncio.sleep(0.01)
        busy = min(ours.values(), key=lambda lease: lease.state.running)
        assert busy.state.running > 0, [lease.state for lease in ours.values()]
        assert not any(task.done() for task in streams)
        await connector.scale("agg", 1, [WorkerLoad(busy.worker_id, "agg", busy.address)])
        assert [w.draining for w in connector.workers("agg")].count(True) == 1
        assert await asyncio.gather(*streams) == [("length", 1200)] * 6
        await wait_for_async(
            "the drained worker to exit",
            lambda: pid_of(busy) not in {w.pid for w in connector.workers("agg")},
            30,
            lambda: logs(connector),
        )
        assert connector.failures("agg") == 0  # it left because it was asked to
        assert len(frontend.workers("mock-model")) == 1
    finally:
        await connector.stop()
        frontend.proc.stop()


async def test_a_failing_command_is_counted_and_retried_with_backoff(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(0)

    connector = LocalConnector(
        {"agg": FAILS},
        NO_NATS,
        backoff=Backoff(base=0.01, cap=0.04),
        log_dir=str(tmp_path),
        sleep=sleep,
    )
    await connector.start()
    try:
        await connector.scale("agg", 1, [])
        await wait_for_async("four retries", lambda: len(delays) >= 4, 30, lambda: logs(connector))
    finally:
        await connector.stop()
    assert "boom" not in capfd.readouterr().out  # the children write to their logs only
    assert delays[:4] == [0.01, 0.02, 0.04, 0.04]
    assert connector.failures("agg") >= 4
    last = connector.last_failure("agg")
    assert last is not None and "exit code 3" in last and "boom: no model here" in last
    assert len(list(tmp_path.iterdir())) >= 4  # a log per attempt


async def test_a_child_that_stayed_up_resets_the_backoff(tmp_path: Path) -> None:
    delays: list[float] = []
    now = [0.0]

    def clock() -> float:  # each child seems to have run 100 s before it failed
        now[0] += 100
        return now[0]

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(0)

    connector = LocalConnector(
        {"agg": FAILS},
        NO_NATS,
        backoff=Backoff(base=0.01, cap=10, stable_s=30),
        log_dir=str(tmp_path),
        clock=clock,
        sleep=sleep,
    )
    await connector.start()
    try:
        await connector.scale("agg", 1, [])
        await wait_for_async("three retries", lambda: len(delays) >= 3, 30, lambda: logs(connector))
    finally:
        await connector.stop()
    assert delays[:3] == [0.01, 0.01, 0.01]


async def test_stop_ends_every_child_and_scale_down_takes_the_youngest(tmp_path: Path) -> None:
    connector = LocalConnector({"agg": SLEEPER}, NO_NATS, grace_period=5, log_dir=str(tmp_path))
    await connector.start()
    await connector.scale("agg", 3, [])
    pids = [w.pid for w in connector.workers("agg")]
    assert len(pids) == 3 and all(alive(pid) for pid in pids)
    stranger = WorkerLoad("x", "agg", f"elsewhere:{pids[0]}")  # another host's pid
    await connector.scale("agg", 2, [stranger])
    assert await connector.replicas("agg") == 2
    await wait_for_async("the youngest to go", lambda: not alive(pids[2]), 5)
    assert alive(pids[0]) and alive(pids[1])
    await connector.stop()
    assert not any(alive(pid) for pid in pids)
    assert all(reaped(pid) for pid in pids)
    assert await connector.replicas("agg") == 0
    await connector.stop()  # again: nothing left to do
    with pytest.raises(ConnectorError):
        await connector.scale("agg", 1, [])


async def test_a_worker_deaf_to_sigterm_is_killed_after_the_grace_on_stop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    connector = LocalConnector(
        {"agg": DEAF}, NO_NATS, grace_period=0.3, kill_margin=0, log_dir=str(tmp_path)
    )
    await connector.start()
    await connector.scale("agg", 1, [])
    (worker,) = connector.workers("agg")
    await wait_for_async(
        "the child to ignore SIGTERM", lambda: "ready" in text(worker.log_path), 30
    )
    began = time.monotonic()
    await connector.stop()
    assert time.monotonic() - began >= 0.3  # SIGTERM first, and the grace waited out
    assert not alive(worker.pid)
    assert "outlived its grace: SIGKILL" in caplog.text


async def test_a_drained_worker_deaf_to_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    connector = LocalConnector(
        {"agg": DEAF}, NO_NATS, grace_period=0.3, kill_margin=0, log_dir=str(tmp_path)
    )
    await connector.start()
    try:
        await connector.scale("agg", 1, [])
        (worker,) = connector.workers("agg")
        await wait_for_async(
            "the child to ignore SIGTERM", lambda: "ready" in text(worker.log_path), 30
        )
        began = time.monotonic()
        await connector.scale("agg", 0, [])
        assert await connector.replicas("agg") == 0  # leaving already
        await wait_for_async("the SIGKILL", lambda: connector.workers("agg") == [], 10)
        assert time.monotonic() - began >= 0.3
        assert not alive(worker.pid)
        assert connector.failures("agg") == 0  # asked to go
    finally:
        await connector.stop()


async def test_children_get_the_pool_s_environment(tmp_path: Path) -> None:
    says = [
        sys.executable,
        "-c",
        "import os, time; e = os.environ; "
        "print(e['ROTOR_NATS'], e['ROTOR_DISAGGREGATION_MODE'], e['ROTOR_GRACE_PERIOD'], "
        "e['EXTRA'], flush=True); time.sleep(600)",
    ]
    connector = LocalConnector(
        {"prefill": says}, NO_NATS, grace_period=7, env={"EXTRA": "yes"}, log_dir=str(tmp_path)
    )
    await connector.start()
    try:
        await connector.scale("prefill", 1, [])
        (worker,) = connector.workers("prefill")
        await wait_for_async("its line", lambda: "\n" in text(worker.log_path), 30)
        assert text(worker.log_path).split() == [NO_NATS, "prefill", "7", "yes"]
    finally:
        await connector.stop()


async def test_scale_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    missing = [str(tmp_path / "no-such-rotor"), "worker"]
    connector = LocalConnector({"agg": missing}, NO_NATS, log_dir=str(tmp_path))
    await connector.start()
    try:
        with pytest.raises(ConnectorError, match="no worker command for the decode pool"):
            await connector.scale("decode", 1, [])
        with pytest.raises(ConnectorError, match="-1"):
            await connector.scale("agg", -1, [])
        with pytest.raises(ConnectorError, match="no-such-rotor"):
            await connector.scale("agg", 1, [])
        assert await connector.replicas("agg") == 0
    finally:
        await connector.stop()


PLANNER = """
import asyncio, sys
from rotor.planner.connectors.local import LocalConnector

async def main():
    connector = LocalConnector(
        {"agg": sys.argv[2:]}, sys.argv[1], grace_period=5, env={"ROTOR_ECHO_DELAY_MS": "0"}
    )
    await connector.start()
    await connector.scale("agg", 1, [])
    (worker,) = connector.workers("agg")
    print(worker.pid, worker.log_path, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def test_a_killed_planner_takes_its_workers_with_it(nats: Nats) -> None:
    planner = subprocess.Popen(
        [sys.executable, "-c", PLANNER, nats.url, *ECHO], stdout=subprocess.PIPE, text=True
    )
    child = 0
    try:
        assert planner.stdout is not None
        line = planner.stdout.readline()
        assert line, f"the planner exited with {planner.wait(10)}"
        pid, log_path = line.split()
        child = int(pid)
        wait_for(
            "the worker to register",
            lambda: WORKER_LINE.search(text(log_path).encode()) is not None,
            60,
            lambda: text(log_path),
        )
        planner.send_signal(signal.SIGKILL)
        planner.wait(10)
        wait_for("the worker to exit", lambda: not alive(child), 15, lambda: text(log_path))
        assert "is leaving" in text(log_path)  # it was told (SIGTERM), and drained
    finally:
        if planner.poll() is None:
            planner.kill()
            planner.wait(10)
        if child and alive(child):
            os.kill(child, signal.SIGKILL)


def test_format_command_splits_like_a_shell() -> None:
    assert format_command("rotor worker out=mocker --speedup-ratio 1") == [
        "rotor", "worker", "out=mocker", "--speedup-ratio", "1",
    ]  # fmt: skip
    assert format_command("rotor worker --model-name 'my model'")[-1] == "my model"
    for bad in ("", "   ", "rotor worker 'unclosed"):
        with pytest.raises(ValueError):
            format_command(bad)


def test_backoff_doubles_up_to_its_cap() -> None:
    backoff = Backoff(base=1.0, cap=60.0)
    assert [backoff.delay(n) for n in range(8)] == [0, 1, 2, 4, 8, 16, 32, 60]
    assert backoff.delay(10_000) == 60.0
