"""Faults under load (issue 40), for real: a nats-server, two `rotor
frontend`s and mocker workers at a real engine's pace, clients streaming
through both frontends, and one fault made with a real signal. Whatever the
fault, no request is lost that rotor could save: each client's answer is
whole (the mocker's scripted story, nothing repeated or missing) or, for a
frontend killed under it, its retry on the other frontend is."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from support.cluster import (
    Frontend,
    Nats,
    Worker,
    nats_server,
    start_frontend,
    start_worker,
)

pytestmark = pytest.mark.e2e

SLOW = ("out=mocker", "--speedup-ratio", "1")  # 10 ms per decode step
ASK = [{"role": "user", "content": "Tell me a story"}]


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


@pytest.fixture(scope="module")
def frontends(nats: Nats) -> Iterator[list[Frontend]]:
    """Two frontends the module's tests share (each test its own model)."""
    started = [start_frontend(nats) for _ in range(2)]
    try:
        yield started
    finally:
        for frontend in started:
            frontend.proc.stop()


def workers_of(nats: Nats, model: str, n: int) -> list[Worker]:
    return [start_worker(nats, *SLOW, "--model-name", model, system=True) for _ in range(n)]


def test_requests_routed_to_a_killed_worker_before_its_lease_ends_move_to_another(
    nats: Nats, frontends: list[Frontend]
) -> None:
    """Issue 40's bug: a request sent to a SIGKILLed worker whose lease has not
    run out yet gets NATS's "no responders" and goes to another worker (a
    migration of cause worker_gone), never a 500; the frontend drops the
    dead worker at once, long before its lease would have."""
    frontend = frontends[0]
    model = "killed-before-expiry"
    workers = workers_of(nats, model, 2)
    try:
        frontend.wait_workers(model, {w.id for w in workers})
        dead, alive = workers
        dead.proc.kill()
        served = []
        for _ in range(4):  # round robin: at least one of them is routed to the dead worker
            r = httpx.post(
                frontend.v1 + "/chat/completions",
                json={"model": model, "messages": ASK, "mock": {"output": "still here"}},
                timeout=30,
            )
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "still here"
            served.append(r.headers["x-rotor-worker"])
        # gone from the pool at the first request that met it, not 5 s later
        assert frontend.workers(model) == [alive.id]
        moved = f'cause="worker_gone",model="{model}"'
        assert frontend.metric("rotor_router_migrations_total", moved) >= 1
        assert f"worker {dead.id} answers no requests" in frontend.log
        assert "not a stream message" not in frontend.log
    finally:
        for w in workers:
            w.proc.stop()
