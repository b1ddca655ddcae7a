"""Health and overload, for real (issue 40): a nats-server, a frontend and
two mocker workers as processes. A worker whose engine is wedged (the wedge
switch on its --system-port: its step loop stops, its process goes on) is
found out by its canary: its running request moves to the other worker and
completes there without a seam, new requests go to the other worker, and
once the wedge is off it serves again. A fleet past the frontend's overload
limits answers 529 (`--overload-status 529`) with Retry-After."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
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

pytestmark = pytest.mark.e2e

SLOW = ("out=mocker", "--speedup-ratio", "1")  # 10 ms per decode step
CANARY = ("--canary-after", "1", "--canary-timeout", "1")  # a wedge found within ~2.5 s
ASK = [{"role": "user", "content": "Tell me a story"}]
STORY = " ".join(f"word{i}" for i in range(150))


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


def unhealthy(frontend: Frontend, model: str) -> list[str]:
    body = httpx.get(frontend.url + "/health", timeout=5).json()
    return list(body.get("unhealthy", {}).get(model, []))


def worker_of(frontend: Frontend, model: str) -> str:
    body = {"model": model, "messages": ASK, "max_tokens": 2, "mock": {"output": "hi there"}}
    r = httpx.post(frontend.v1 + "/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.headers["x-rotor-worker"]


def test_a_wedged_worker_is_found_out_its_request_moves_and_it_comes_back(nats: Nats) -> None:
    model = "wedged-model"
    workers = {
        w.id: w
        for w in (
            start_worker(nats, *SLOW, *CANARY, "--model-name", model, system=True) for _ in range(2)
        )
    }
    frontend = start_frontend(nats)
    try:
        frontend.wait_workers(model, set(workers))
        wedged: list[Worker] = []
        text: list[str] = []
        body = {"model": model, "messages": ASK, "stream": True, "max_tokens": 2000}
        body |= {"mock": {"output": STORY}, "stream_options": {"include_usage": True}}
        finish = None
        with httpx.stream("POST", frontend.v1 + "/chat/completions", json=body, timeout=60) as r:
            assert r.status_code == 200
            first = r.headers["x-rotor-worker"]
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                assert "error" not in chunk, chunk
                for choice in chunk["choices"]:
                    text.append(choice["delta"].get("content") or "")
                    finish = choice.get("finish_reason") or finish
                if not wedged and len("".join(text)) > 60:
                    w = workers[first]
                    answer = httpx.post(w.system_url + "/debug/wedge", json={}, timeout=5)
                    assert answer.json() == {"wedged": True, "seconds_left": None}
                    wedged.append(w)
        assert wedged, "the stream ended before the wedge"
        assert "".join(text) == STORY and finish == "stop"  # nothing repeated, nothing missing
        assert frontend.metric("rotor_router_migrations_total", 'cause="unhealthy"') == 1
        sick, (other,) = wedged[0], set(workers) - {first}
        assert unhealthy(frontend, model) == [first]
        assert set(frontend.workers(model)) == {other}
        assert httpx.get(sick.system_url + "/health", timeout=5).status_code == 503
        assert httpx.get(sick.system_url + "/live", timeout=5).status_code == 200
        assert frontend.metric("rotor_router_unhealthy_workers") == 1
        assert {worker_of(frontend, model) for _ in range(4)} == {other}
        httpx.delete(sick.system_url + "/debug/wedge", timeout=5)
        frontend.wait_workers(model, set(workers), timeout=15)  # a canary answered
        assert unhealthy(frontend, model) == []
        wait_for("both workers serving", lambda: worker_of(frontend, model) == first, 15)
        assert httpx.get(sick.system_url + "/health", timeout=5).status_code == 200
    finally:
        frontend.proc.stop()
        for w in workers.values():
            w.proc.stop()


def test_a_fleet_past_its_overload_limits_answers_529_with_retry_after(nats: Nats) -> None:
    """Each worker's prefill of a long prompt takes seconds (2 ms a token):
    one such request each puts both past `--max-prefill-tokens 100` (this
    frontend counts what it sent until its first output), so a third is
    refused at once; once they have begun (and the workers' leases say so),
    the fleet takes requests again."""
    model = "busy-model"
    slow_prefill = ("--prefill-ms-per-token", "2")
    workers = [start_worker(nats, *SLOW, *slow_prefill, "--model-name", model) for _ in range(2)]
    frontend = start_frontend(nats, "--max-prefill-tokens", "100", "--overload-status", "529")
    try:
        frontend.wait_workers(model, {w.id for w in workers})
        long_prompt = [{"role": "user", "content": "tell me " * 1500}]
        results: list[httpx.Response] = []

        def long_request() -> None:
            body = {"model": model, "messages": long_prompt, "max_tokens": 2}
            body["mock"] = {"output": "done"}
            results.append(httpx.post(frontend.v1 + "/chat/completions", json=body, timeout=60))

        threads = [threading.Thread(target=long_request) for _ in range(2)]
        for t in threads:
            t.start()

        def in_flight() -> int:
            body: dict[str, Any] = httpx.get(frontend.url + "/health", timeout=5).json()
            return sum(w["in_flight_here"] for w in body["workers"][model])

        wait_for("both long prompts routed", lambda: in_flight() == 2, 15)
        refused = httpx.post(
            frontend.v1 + "/chat/completions",
            json={"model": model, "messages": ASK, "max_tokens": 2},
            timeout=10,
        )
        for t in threads:
            t.join()
        assert refused.status_code == 529, refused.text
        assert refused.headers["retry-after"] == "1"
        assert "overloaded" in refused.json()["error"]["message"]
        assert sorted(r.status_code for r in results) == [200, 200]
        assert {r.headers["x-rotor-worker"] for r in results} == {w.id for w in workers}
        assert frontend.metric("rotor_router_overloaded_total") == 1

        def served() -> bool:  # once the workers' next leases show no prefill pending
            body = {"model": model, "messages": ASK, "max_tokens": 2}
            return httpx.post(frontend.v1 + "/chat/completions", json=body, timeout=10).is_success

        wait_for("the fleet to take requests again", served, 10)
    finally:
        frontend.proc.stop()
        for w in workers:
            w.proc.stop()
