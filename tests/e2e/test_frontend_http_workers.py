"""`rotor frontend --http-workers 2` for real: a nats-server, a mocker worker,
and a frontend of two processes on one port, each a whole frontend. Both
serve; answers are `rotor run`'s; SIGTERM drains; a killed parent takes its
children with it; each process follows the KV events on its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import (
    Frontend,
    Nats,
    Worker,
    nats_server,
    start_frontend,
    start_worker,
    wait_for,
)
from support.server import rotor_server
from support.sse import live_chunks

pytestmark = pytest.mark.e2e

MODEL = "mock-model"
SLOW = ("out=mocker", "--speedup-ratio", "1")  # 10 ms per decode step
ASK = [{"role": "user", "content": "Tell me a story"}]
STORY = " ".join(f"word{i}" for i in range(120))
TRIES = 200  # fresh connections before two processes must both have answered (2^-199)


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


@pytest.fixture(scope="module")
def worker(nats: Nats) -> Iterator[Worker]:
    w = start_worker(nats, *SLOW)
    try:
        yield w
    finally:
        w.proc.stop()


def start_two(nats: Nats, worker: Worker, *args: str) -> Frontend:
    """A frontend of two processes, both of which list `worker`."""
    frontend = start_frontend(nats, "--http-workers", "2", *args)
    assert len(children(frontend.process.pid)) == 2
    wait_for("both processes to list the worker", lambda: len(listing(frontend, worker)) == 2)
    return frontend


@pytest.fixture(scope="module")
def frontend(nats: Nats, worker: Worker) -> Iterator[Frontend]:
    f = start_two(nats, worker, "--router", "kv")
    try:
        yield f
    finally:
        f.proc.stop()


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def running(pid: int) -> bool:
    """The process exists and is not a zombie waiting for a reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def health_by_pid(frontend: Frontend, until: Any = None) -> dict[int, dict]:
    """/health over fresh connections (the kernel picks the process for each)
    until both processes have answered (and `until(body)` holds for each)."""
    seen: dict[int, dict] = {}
    for _ in range(TRIES):
        with httpx.Client(timeout=5) as client:
            body = client.get(frontend.url + "/health").json()
        if until is None or until(body):
            seen[body["pid"]] = body
        if len(seen) == 2:
            break
    return seen


def listing(frontend: Frontend, worker: Worker) -> set[int]:
    """The processes whose /health lists `worker`."""
    seen = health_by_pid(
        frontend, lambda b: worker.id in {w["id"] for w in b.get("workers", {}).get(MODEL, [])}
    )
    return set(seen)


def stream_text(client: httpx.Client, url: str, body: dict[str, Any]) -> tuple[str, str | None]:
    text: list[str] = []
    finish = None
    with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200, r.read()
        for chunk in live_chunks(r):
            for c in chunk["choices"]:
                text.append(c["delta"].get("content") or "")
                finish = c.get("finish_reason") or finish
    return "".join(text), finish


def answers(url: str, mock: dict[str, Any]) -> tuple[tuple[str, str], tuple[str, str | None]]:
    """(whole, streamed) answers, each over a fresh connection."""
    body = {"model": MODEL, "messages": ASK, "mock": mock}
    with httpx.Client(timeout=30) as client:
        r = client.post(url + "/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        whole = (choice["message"]["content"], choice["finish_reason"])
    with httpx.Client(timeout=30) as client:
        streamed = stream_text(client, url, {**body, "stream": True})
    return whole, streamed


# -- serving -------------------------------------------------------------------------------


def test_both_processes_serve_requests_on_the_shared_port(frontend: Frontend) -> None:
    pids = set(children(frontend.process.pid))
    body = {"model": MODEL, "messages": ASK, "mock": {"output": "served"}}
    served: set[int] = set()
    for _ in range(TRIES):
        # One connection: the /health before and after name the process that served the chat.
        with httpx.Client(timeout=30) as client:
            pid = client.get(frontend.url + "/health").json()["pid"]
            r = client.post(frontend.v1 + "/chat/completions", json=body)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "served"
            if client.get(frontend.url + "/health").json()["pid"] == pid:
                served.add(pid)
        if served == pids:
            break
    assert served == pids


def test_answers_are_those_of_rotor_run(frontend: Frontend) -> None:
    mocks = [
        {"output": "The answer is <b>42</b>, said the mocker. 東京 🙂", "tokens_per_step": 3},
        {"output": " ".join(f"word{i}" for i in range(30))},
    ]
    with rotor_server(*SLOW) as single:
        for mock in mocks:
            expected = answers(single.url, mock)
            assert expected[0] == expected[1] == (mock["output"], "stop")
            for _ in range(4):  # fresh connections: both processes answer some
                assert answers(frontend.url, mock) == expected


def test_each_process_follows_the_kv_events_on_its_own(frontend: Frontend, worker: Worker) -> None:
    system = "You are a kv test. " + " ".join(f"fact-{i}." for i in range(80))
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
        "max_tokens": 4,
    }
    with httpx.Client(timeout=30) as client:
        r = client.post(frontend.v1 + "/chat/completions", json=body)
        assert r.status_code == 200, r.text
        routed_by = client.get(frontend.url + "/health").json()["pid"]

    def indexed(b: dict) -> bool:
        return any(w["kv_blocks_indexed"] > 0 for w in b["workers"][MODEL] if w["id"] == worker.id)

    # The process that did not route the request knows the worker's blocks too.
    wait_for(
        "both processes to index the blocks", lambda: len(health_by_pid(frontend, indexed)) == 2
    )
    # And a repeat through either process finds the prefix cached.
    for pid in set(children(frontend.process.pid)) - {routed_by}:
        for _ in range(TRIES):
            with httpx.Client(timeout=30) as client:
                if client.get(frontend.url + "/health").json()["pid"] != pid:
                    continue
                r = client.post(frontend.v1 + "/chat/completions", json=body)
                assert r.status_code == 200, r.text
                assert int(r.headers["x-rotor-kv-overlap"].split("/")[0]) > 0, r.headers
                break
        else:
            raise AssertionError(f"process {pid} never answered")


# -- lifecycle -----------------------------------------------------------------------------


def test_sigterm_to_the_parent_drains_a_stream_and_exits_0(nats: Nats, worker: Worker) -> None:
    frontend = start_two(nats, worker)
    pids = children(frontend.process.pid)
    try:
        body = {"model": MODEL, "messages": ASK, "stream": True, "mock": {"output": STORY}}
        text: list[str] = []
        finish = None
        with (
            httpx.Client(timeout=60) as client,
            client.stream("POST", frontend.v1 + "/chat/completions", json=body) as r,
        ):
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                assert "error" not in chunk, chunk
                for c in chunk["choices"]:
                    piece = c["delta"].get("content") or ""
                    if piece and not "".join(text):
                        frontend.proc.terminate()  # the stream has begun
                    text.append(piece)
                    finish = c.get("finish_reason") or finish
        assert ("".join(text), finish) == (STORY, "stop")
        assert frontend.process.wait(30) == 0
        wait_for("the children to exit", lambda: not any(running(p) for p in pids))
    finally:
        frontend.proc.stop()


def test_a_killed_parent_leaves_no_children(nats: Nats, worker: Worker) -> None:
    frontend = start_two(nats, worker)
    pids = children(frontend.process.pid)
    try:
        assert all(running(p) for p in pids)
        frontend.proc.kill()
        wait_for("the children to exit", lambda: not any(running(p) for p in pids))
        with pytest.raises(httpx.ConnectError):  # nobody holds the port any more
            httpx.get(frontend.url + "/live", timeout=5)
    finally:
        frontend.proc.stop()
        for p in pids:  # should the test fail: no strays either
            if running(p):
                os.kill(p, signal.SIGKILL)


def test_a_child_that_dies_stops_the_other_and_the_parent_exits_1(
    nats: Nats, worker: Worker
) -> None:
    frontend = start_two(nats, worker)
    first, second = children(frontend.process.pid)
    try:
        os.kill(first, signal.SIGKILL)
        assert frontend.process.wait(30) == 1
        assert not running(second)
    finally:
        frontend.proc.stop()


@pytest.mark.parametrize(
    ("count", "message"),
    [("0", "must be at least 1, got 0"), ("two", "expected an integer, got 'two'")],
)
def test_a_bad_count_is_a_one_line_error(count: str, message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rotor.cli", "frontend", "--http-workers", count],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"rotor frontend: argument --http-workers: {message}\n"


def test_health_names_the_process_that_answered(frontend: Frontend) -> None:
    assert set(health_by_pid(frontend)) == set(children(frontend.process.pid))
    with rotor_server("out=mocker", "--speedup-ratio", "0") as single:
        assert httpx.get(single.url + "/health").json()["pid"] == single.process.pid
