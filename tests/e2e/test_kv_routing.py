"""`--router kv` for real: three mocker workers publishing KV events, a
frontend routing on them, and the prefix cache hits that result."""

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
    wait_for,
)

pytestmark = pytest.mark.e2e

MODEL = "mock-model"


def system_prompt(topic: str) -> str:
    return f"You are an expert on {topic}. " + " ".join(f"{topic}-fact-{i}." for i in range(60))


@pytest.fixture(scope="module")
def kv_cluster() -> Iterator[tuple[Nats, Frontend, dict[str, Worker]]]:
    with nats_server() as nats:
        workers = {
            w.id: w
            for w in (start_worker(nats, "out=mocker", "--speedup-ratio", "0") for _ in range(3))
        }
        frontend = start_frontend(nats, "--router", "kv", "--log-level", "debug")
        try:
            frontend.wait_workers(MODEL, set(workers))
            yield nats, frontend, workers
        finally:
            frontend.proc.stop()
            for w in workers.values():
                w.proc.stop()


def ask(frontend: Frontend, system: str, question: str) -> httpx.Response:
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": 4,
    }
    r = httpx.post(frontend.v1 + "/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r


def indexed(frontend: Frontend, worker: str) -> int:
    body = httpx.get(frontend.url + "/health", timeout=5).json()
    for w in body["workers"][MODEL]:
        if w["id"] == worker:
            return w["kv_blocks_indexed"]
    return 0


def test_a_repeated_prefix_goes_where_it_is_cached(
    kv_cluster: tuple[Nats, Frontend, dict[str, Worker]],
) -> None:
    _, frontend, _ = kv_cluster
    # the module's other test routes on this frontend too: what these requests add
    hits = frontend.metric("rotor_router_kv_hits_total")
    blocks = frontend.metric("rotor_router_kv_overlap_blocks_total")
    overlaps: list[int] = []
    first_of: dict[str, str] = {}
    for topic in ("ships", "bees", "clocks"):
        r = ask(frontend, system_prompt(topic), "first question")
        overlaps.append(int(r.headers["x-rotor-kv-overlap"]))
        # At most the template's opening block is shared with an earlier topic.
        assert overlaps[-1] <= 2
        worker = r.headers["x-rotor-worker"]
        first_of[topic] = worker
        wait_for(f"{worker}'s blocks in the index", lambda w=worker: indexed(frontend, w) > 0)
    for topic in ("clocks", "ships", "bees"):
        r = ask(frontend, system_prompt(topic), "a second, different question")
        assert r.headers["x-rotor-worker"] == first_of[topic]
        overlap = int(r.headers["x-rotor-kv-overlap"])
        overlaps.append(overlap)
        assert overlap > 5
        cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= overlap * 16 - 16  # the worker really had them
    # the counters say what the responses said: a hit per request that found blocks
    assert frontend.metric("rotor_router_kv_hits_total") - hits == sum(o > 0 for o in overlaps)
    assert frontend.metric("rotor_router_kv_overlap_blocks_total") - blocks == sum(overlaps)
    assert sum(overlaps[3:]) > 15


def test_a_dead_workers_blocks_leave_the_index(
    kv_cluster: tuple[Nats, Frontend, dict[str, Worker]],
) -> None:
    _, frontend, workers = kv_cluster
    r = ask(frontend, system_prompt("volcanoes"), "q1")
    victim = r.headers["x-rotor-worker"]
    wait_for("the blocks in the index", lambda: indexed(frontend, victim) > 0)
    assert int(ask(frontend, system_prompt("volcanoes"), "q2").headers["x-rotor-kv-overlap"]) > 0
    workers[victim].proc.kill()
    frontend.wait_workers(MODEL, set(workers) - {victim}, timeout=15)
    after = ask(frontend, system_prompt("volcanoes"), "q3")
    assert after.headers["x-rotor-worker"] != victim
    assert int(after.headers["x-rotor-kv-overlap"]) <= 2  # nobody else holds the prefix
