"""Faults under load (issue 40), for real: a nats-server, two `rotor
frontend`s and mocker workers at a real engine's pace, clients streaming
through both frontends, and one fault made with a real signal. Whatever the
fault, no request is lost that rotor could save: each client's answer is
whole (the mocker's scripted story, nothing repeated or missing) or, for a
frontend killed under it, its retry on the other frontend is."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

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
ASK = [{"role": "user", "content": "Tell me a story"}]
STORY = " ".join(f"w{i}" for i in range(30))  # ~90 tokens: ~1 s an answer
CLIENTS = 6
GONE = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError)  # its frontend is gone


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


# -- clients streaming through both frontends ------------------------------------------------


@dataclass
class Answer:
    frontend: str
    text: str = ""
    finish: str | None = None
    error: str | None = None  # None: the whole story, finished
    started_after_fault: bool = False


@dataclass
class Client:
    """One client's answers: each request a list of attempts (a retry on the
    other frontend after its frontend was gone)."""

    requests: list[list[Answer]] = field(default_factory=list)

    def whole_after_fault(self) -> int:
        return sum(1 for r in self.requests if r[0].started_after_fault and r[-1].error is None)


class Load:
    """`CLIENTS` threads streaming the story in a closed loop, their requests
    alternating between the frontends; a request whose frontend is gone
    (it cannot connect, or the connection broke) is retried once on the
    other, as a client behind a load balancer would."""

    def __init__(self, urls: list[str], model: str) -> None:
        self.urls = urls
        self.model = model
        self.clients = [Client() for _ in range(CLIENTS)]
        self.faulted = threading.Event()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(CLIENTS)
        ]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)
            assert not t.is_alive(), "a client hung"

    def fault(self) -> None:
        """From now on, requests count as started after the fault."""
        self.faulted.set()

    def _run(self, i: int) -> None:
        turn = i
        while not self._stop.is_set():
            turn += 1
            url = self.urls[turn % len(self.urls)]
            after = self.faulted.is_set()
            first = self._ask(url, after)
            attempts = [first]
            if first.error is not None and first.error.startswith("gone"):
                other = self.urls[(turn + 1) % len(self.urls)]
                attempts.append(self._ask(other, after))
            self.clients[i].requests.append(attempts)

    def _ask(self, url: str, after: bool) -> Answer:
        answer = Answer(url, started_after_fault=after)
        body = {"model": self.model, "messages": ASK, "stream": True, "mock": {"output": STORY}}
        pieces: list[str] = []
        try:
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
                if r.status_code != 200:
                    answer.error = f"http {r.status_code}: {r.read()[:300]!r}"
                    return answer
                for line in r.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        answer.error = f"error event: {chunk['error']}"
                        return answer
                    for c in chunk["choices"]:
                        pieces.append(c["delta"].get("content") or "")
                        answer.finish = c.get("finish_reason") or answer.finish
        except GONE as e:
            answer.error = f"gone: {type(e).__name__}: {e}"
            return answer
        answer.text = "".join(pieces)
        if answer.text != STORY or answer.finish != "stop":
            answer.error = f"not the whole story ({answer.finish}): {answer.text!r}"
        return answer

    # -- what the tests observe ---------------------------------------------------------------

    def answered(self, n: int = 1) -> bool:
        """Every client has `n` whole answers (of requests started after the
        fault, once there was one): the load is steady, or back."""
        if self.faulted.is_set():
            return all(c.whole_after_fault() >= n for c in self.clients)
        return all(sum(1 for r in c.requests if r[-1].error is None) >= n for c in self.clients)

    def requests(self) -> list[list[Answer]]:
        return [r for c in self.clients for r in c.requests]

    def lost(self) -> list[Answer]:
        """The requests that failed for good."""
        return [r[-1] for r in self.requests() if r[-1].error is not None]


def steady(load: Load) -> None:
    wait_for("every client to have an answer", load.answered, 60, detail=lambda: str(load.lost()))


def back(load: Load, n: int = 2) -> None:
    wait_for(
        f"every client to have {n} answers begun after the fault",
        lambda: load.answered(n),
        60,
        detail=lambda: str(load.lost()),
    )


@pytest.fixture
def model(request: pytest.FixtureRequest) -> str:
    """A model of the test's own: its workers are the ones it may hurt."""
    return request.node.name.removeprefix("test_").replace("_", "-")[:40]


def loses_nothing(
    nats: Nats,
    frontends: list[Frontend],
    model: str,
    workers: int,
    fault: Callable[[list[Worker]], None],
    after: Callable[[list[Worker]], None] | None = None,
) -> None:
    """`workers` workers of the model behind both frontends, every client
    answered, then `fault` (given the workers), then every client answered
    again: no request lost. `after`: a last check, the workers still up."""
    started = workers_of(nats, model, workers)
    try:
        for f in frontends:
            f.wait_workers(model, {w.id for w in started})
        with Load([f.url for f in frontends], model) as load:
            steady(load)
            load.fault()
            fault(started)
            back(load)
        assert load.lost() == []
        if after is not None:
            after(started)
    finally:
        for w in started:
            w.proc.stop()


def test_a_worker_killed_under_load_loses_no_request(
    nats: Nats, frontends: list[Frontend], model: str
) -> None:
    def kill(workers: list[Worker]) -> None:
        workers[0].proc.kill()
        for f in frontends:  # gone from both pools (its lease, or a request that met it)
            f.wait_workers(model, {w.id for w in workers[1:]}, timeout=15)

    loses_nothing(nats, frontends, model, 3, kill)


def test_a_worker_drained_under_load_loses_no_request(
    nats: Nats, frontends: list[Frontend], model: str
) -> None:
    def drain(workers: list[Worker]) -> None:
        workers[0].proc.terminate()
        assert workers[0].proc.process.wait(30) == 0  # it finished what it had, and left

    loses_nothing(nats, frontends, model, 3, drain)


def test_a_frontend_killed_under_load_fails_only_its_own_requests_and_their_retries_succeed(
    nats: Nats, frontends: list[Frontend], model: str
) -> None:
    workers = workers_of(nats, model, 2)
    doomed = start_frontend(nats)
    try:
        for f in (frontends[0], doomed):
            f.wait_workers(model, {w.id for w in workers})
        with Load([frontends[0].url, doomed.url], model) as load:
            steady(load)
            load.fault()
            doomed.proc.kill()
            back(load)
        assert load.lost() == []
        failed = [r[0] for r in load.requests() if r[0].error is not None]
        assert failed, "no request was in flight on the killed frontend"
        assert all(a.frontend == doomed.url and a.error.startswith("gone") for a in failed)
    finally:
        doomed.proc.stop()
        for w in workers:
            w.proc.stop()


def test_a_frontend_killed_mid_answer_stops_its_work_on_the_worker(nats: Nats, model: str) -> None:
    """A dead frontend sends no abort: its worker learns it from NATS (its
    batches to that frontend answered "no responders") and stops the
    request, rather than run it to its end (50 s here) for nobody."""
    (worker,) = workers_of(nats, model, 1)
    doomed = start_frontend(nats)
    try:
        doomed.wait_workers(model, {worker.id})
        body = {"model": model, "messages": ASK, "stream": True}
        body |= {"max_tokens": 5000, "ignore_eos": True}

        def ask() -> None:
            try:
                with httpx.stream("POST", doomed.v1 + "/chat/completions", json=body) as r:
                    for _ in r.iter_lines():
                        pass
            except httpx.HTTPError:
                pass  # its frontend is killed under it

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        active = lambda: worker.metric("rotor_engine_active_requests")  # noqa: E731
        wait_for("the request to run on the worker", lambda: active() == 1)
        doomed.proc.kill()
        wait_for("the worker to stop it", lambda: active() == 0, timeout=10)
        asking.join(10)
        assert "frontend" in worker.proc.text() and "is gone" in worker.proc.text()
    finally:
        doomed.proc.stop()
        worker.proc.stop()


def test_a_wedged_engine_loses_no_request(
    nats: Nats, frontends: list[Frontend], model: str
) -> None:
    """An engine stuck for a while (the mocker's wedge switch): its streams
    wait, or move, but none is lost."""

    def wedge(workers: list[Worker]) -> None:
        switch = f"{workers[0].system_url}/debug/wedge"
        assert httpx.get(switch, timeout=5).json()["wedged"] is False
        assert httpx.post(switch, json={"seconds": 5}, timeout=5).json()["wedged"] is True

    loses_nothing(nats, frontends, model, 2, wedge)


def test_nats_restarted_under_load_loses_no_request(
    nats: Nats, frontends: list[Frontend], model: str
) -> None:
    """Last: the module's nats-server restarts (an empty store); every
    process reconnects, workers register again."""

    def registered_again(workers: list[Worker]) -> None:
        for f in frontends:
            f.wait_workers(model, {w.id for w in workers})

    loses_nothing(nats, frontends, model, 2, lambda _: nats.restart(), registered_again)
