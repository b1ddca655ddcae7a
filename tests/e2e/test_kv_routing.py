"""`--router kv` for real: three mocker workers publishing KV events, a
frontend routing on them, and the prefix cache hits that result; and
predicted routing: with the workers' KV events held back
(`--kv-events-delay-ms`), a prefix's second request goes to the first one's
worker before that worker's events arrive, where a frontend with
`--router-predicted-ttl 0` sends it elsewhere."""

from __future__ import annotations

import json
import threading
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


def ask(frontend: Frontend, system: str, question: str, salt: str | None = None) -> httpx.Response:
    body: dict[str, object] = {
        "model": MODEL,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": 4,
    }
    if salt is not None:
        body["cache_salt"] = salt
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


def test_tenants_with_different_salts_share_no_blocks(
    kv_cluster: tuple[Nats, Frontend, dict[str, Worker]],
) -> None:
    """cache_salt over NATS: the router's hashes and the worker's cache are
    salted alike, so another tenant's request of the same prompt overlaps
    nothing (not even the template's opening block) and finds nothing cached."""
    _, frontend, _ = kv_cluster
    system = system_prompt("glaciers")
    first = ask(frontend, system, "q1", salt="tenant-a")
    assert first.headers["x-rotor-kv-overlap"] == "0"
    worker = first.headers["x-rotor-worker"]
    # the worker's own events name the salted blocks (the salt reached it)
    wait_for(
        f"{worker}'s salted blocks in its events",
        lambda: _device_blocks(ask(frontend, system, "q2", salt="tenant-a")) > 5,
    )
    again = ask(frontend, system, "q3", salt="tenant-a")
    assert again.headers["x-rotor-worker"] == worker
    overlap = int(again.headers["x-rotor-kv-overlap"])
    assert overlap > 5
    cached = again.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= overlap * 16 - 16  # the worker really had them
    other = ask(frontend, system, "q1", salt="tenant-b")
    assert other.headers["x-rotor-kv-overlap"] == "0"
    details = other.json()["usage"].get("prompt_tokens_details") or {}
    assert not details.get("cached_tokens")


def _device_blocks(r: httpx.Response) -> int:
    tiers = dict(t.split("=") for t in r.headers["x-rotor-kv-tiers"].split(","))
    return int(tiers["device"])


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


# -- predicted routing: the KV events late on purpose ------------------------------------

DELAY_MS = 4000  # the workers' KV events reach the frontends this late


@pytest.fixture(scope="module")
def late_events() -> Iterator[tuple[Frontend, Frontend, dict[str, Worker]]]:
    """Two mocker workers (10 ms a decode step) whose KV events are held back
    DELAY_MS, a frontend predicting (for 60 s), and one with `--router-predicted-ttl 0`."""
    with nats_server() as nats:
        late = ("out=mocker", "--speedup-ratio", "1", "--kv-events-delay-ms", str(DELAY_MS))
        workers = {w.id: w for w in (start_worker(nats, *late) for _ in range(2))}
        # 60 s, not the default 5: the prediction must outlive the events' delay
        # however late the first prefill runs on a loaded machine (it counts from
        # the routing, the delay from the stored blocks)
        predicting = start_frontend(nats, "--router", "kv", "--router-predicted-ttl", "60")
        blind = start_frontend(nats, "--router", "kv", "--router-predicted-ttl", "0")
        try:
            for frontend in (predicting, blind):
                frontend.wait_workers(MODEL, set(workers))
            yield predicting, blind, workers
        finally:
            for frontend in (predicting, blind):
                frontend.proc.stop()
            for w in workers.values():
                w.proc.stop()


def kv_used(frontend: Frontend, worker: str) -> int:
    """The KV blocks the worker's last lease says it uses, as the frontend saw it."""
    body = httpx.get(frontend.url + "/health", timeout=5).json()
    return next(w["kv_blocks_used"] for w in body["workers"][MODEL] if w["id"] == worker)


class LongAnswer(threading.Thread):
    """A streamed answer of 20,000 tokens (200 s at 10 ms a step), read until
    `stop()`: a request that keeps its worker busy with its prefix cached."""

    def __init__(self, frontend: Frontend, system: str) -> None:
        super().__init__(daemon=True)
        self.body = {
            "model": MODEL,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": "go"}],
            "max_tokens": 20000,
            "ignore_eos": True,
            "stream": True,
        }
        self.url = frontend.v1 + "/chat/completions"
        self.worker: str | None = None
        self.streaming = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        with httpx.stream("POST", self.url, json=self.body, timeout=60) as r:
            self.worker = r.headers["x-rotor-worker"]
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    assert "error" not in json.loads(line[6:])
                    self.streaming.set()
                if self.done.is_set():
                    return  # closing the stream aborts it on the worker

    def stop(self) -> None:
        self.done.set()
        self.join(30)


def test_a_second_request_follows_the_first_before_its_kv_events_come(
    late_events: tuple[Frontend, Frontend, dict[str, Worker]],
) -> None:
    predicting, blind, workers = late_events
    system = system_prompt("lighthouses")
    first = LongAnswer(predicting, system)
    first.start()
    try:
        wait_for("the first answer to stream", first.streaming.is_set, 30)
        busy = first.worker
        assert busy is not None
        (idle,) = set(workers) - {busy}
        # both frontends see the first one's worker busy (its lease), and
        # neither has heard of its blocks (its events are late)
        for frontend in (predicting, blind):
            wait_for("the busy worker's lease", lambda f=frontend: kv_used(f, busy) > 5)
        assert indexed(predicting, busy) == 0

        second = ask(predicting, system, "a second, different question")
        assert second.headers["x-rotor-worker"] == busy
        overlap = int(second.headers["x-rotor-kv-overlap"])
        assert overlap > 5
        tiers = dict(t.split("=") for t in second.headers["x-rotor-kv-tiers"].split(","))
        assert int(tiers["predicted"]) == overlap and int(tiers["device"]) == 0
        cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= overlap * 16 - 16  # the worker really had them
        assert indexed(predicting, busy) == 0  # decided, and answered, before the events

        # the frontend that does not predict knows nothing yet, and avoids the busy worker
        elsewhere = ask(blind, system, "a third question")
        assert elsewhere.headers["x-rotor-worker"] == idle
        assert elsewhere.headers["x-rotor-kv-overlap"] == "0"
        assert indexed(blind, busy) == 0
    finally:
        first.stop()
    predicted = predicting.metric("rotor_router_kv_tier_blocks_total", 'medium="predicted"')
    assert predicted >= overlap

    # the events come: the prediction is confirmed, the blocks are real
    wait_for("the late events", lambda: indexed(predicting, busy) > 0, DELAY_MS / 1000 + 15)
    later = ask(predicting, system, "a fourth question")
    tiers = dict(t.split("=") for t in later.headers["x-rotor-kv-tiers"].split(","))
    assert int(tiers["device"]) > 5 and tiers["predicted"] == "0"
