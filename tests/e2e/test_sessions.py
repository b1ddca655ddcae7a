"""Session affinity end to end: a real nats-server, two mocker workers and a
frontend routing round robin. Turns that name a session (`x-rotor-session-id`
or the body's `session_id`) stay on one worker, move when it dies, and are
counted; `rotor run` takes the same header and field."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from support.cluster import Frontend, Worker, nats_server, start_frontend, start_worker
from support.server import rotor_server

MODEL = "mock-model"


def body(**extra: object) -> dict:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        **extra,
    }


def served_by(frontend: Frontend, session: str | None = None, **extra: object) -> str:
    headers = {"x-rotor-session-id": session} if session is not None else {}
    r = httpx.post(
        frontend.v1 + "/chat/completions", json=body(**extra), headers=headers, timeout=30
    )
    assert r.status_code == 200, r.text
    return r.headers["x-rotor-worker"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Frontend, list[Worker]]]:
    with nats_server() as nats:
        workers = [start_worker(nats, "out=mocker", "--speedup-ratio", "0") for _ in range(2)]
        frontend = start_frontend(nats, "--router", "round_robin", "--session-ttl", "60")
        try:
            frontend.wait_workers(MODEL, {w.id for w in workers})
            yield frontend, workers
        finally:
            frontend.proc.stop()
            for w in workers:
                w.proc.stop()


def test_a_session_s_turns_stay_on_one_worker(cluster: tuple[Frontend, list[Worker]]) -> None:
    frontend, workers = cluster
    assert len({served_by(frontend) for _ in range(4)}) == 2  # round robin without one
    for session in ("agent-1", "agent-2"):
        first = served_by(frontend, session)
        assert {served_by(frontend, session) for _ in range(5)} == {first}
    # the body's field means the same, and agrees with the header
    first = served_by(frontend, session_id="agent-3")
    assert {served_by(frontend, session_id="agent-3") for _ in range(3)} == {first}
    assert served_by(frontend, "agent-3", session_id="agent-3") == first
    pinned = frontend.metric("rotor_router_session_routes_total", 'outcome="pinned"')
    assert pinned >= 14
    assert frontend.metric("rotor_router_session_routes_total", 'outcome="new"') == 3


def test_other_apis_take_the_header(cluster: tuple[Frontend, list[Worker]]) -> None:
    frontend, _ = cluster
    headers = {"x-rotor-session-id": "claude-1", "anthropic-version": "2023-06-01"}
    seen = set()
    for _ in range(3):
        r = httpx.post(
            frontend.url + "/v1/messages",
            json={"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]},
            headers=headers,
            timeout=30,
        )
        assert r.status_code == 200, r.text
        seen.add(r.headers["x-rotor-worker"])
    assert len(seen) == 1


@pytest.mark.parametrize(
    ("headers", "extra", "names"),
    [
        ({"x-rotor-session-id": "a"}, {"session_id": "b"}, "session_id"),
        ({"x-rotor-session-id": "x" * 257}, {}, "x-rotor-session-id"),
        ({}, {"session_id": ""}, "session_id"),
    ],
    ids=["disagree", "header-too-long", "empty-field"],
)
def test_a_bad_session_id_is_a_400_naming_it(
    cluster: tuple[Frontend, list[Worker]], headers: dict, extra: dict, names: str
) -> None:
    frontend, _ = cluster
    r = httpx.post(
        frontend.v1 + "/chat/completions", json=body(**extra), headers=headers, timeout=30
    )
    assert r.status_code == 400
    assert r.json()["error"]["param"] == names


def test_a_session_moves_when_its_worker_dies(cluster: tuple[Frontend, list[Worker]]) -> None:
    frontend, workers = cluster
    home = served_by(frontend, "mover")
    (dying,) = [w for w in workers if w.id == home]
    (other,) = [w for w in workers if w.id != home]
    dying.proc.kill()
    frontend.wait_workers(MODEL, {other.id})
    before = frontend.metric("rotor_router_session_routes_total", 'outcome="moved_gone"')
    assert served_by(frontend, "mover") == other.id
    assert (
        frontend.metric("rotor_router_session_routes_total", 'outcome="moved_gone"') == before + 1
    )
    assert {served_by(frontend, "mover") for _ in range(3)} == {other.id}


def test_rotor_run_takes_a_session_too() -> None:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as server:
        r = httpx.post(
            server.v1 + "/chat/completions",
            json=body(session_id="s"),
            headers={"x-rotor-session-id": "s"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
