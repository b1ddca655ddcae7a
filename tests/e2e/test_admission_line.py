"""The frontend's admission line (`--max-waiting-requests`) end to end, in
`rotor run` and in a `rotor frontend` over a NATS worker: behind one
admission place and one engine sequence, requests wait in the frontend and
are admitted best priority first; a full line refuses its worst (a 503); a
client that leaves the line is out of it at once; a nonzero priority to an
fcfs engine is a 400 before any wait. Order is what is observed: every
step waits on the server's own gauges, and the engine runs one request at a
time, so the order answers come back in is the order they were admitted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from support.cluster import nats_server, start_frontend, start_worker
from support.server import rotor_server

pytestmark = pytest.mark.e2e

# one engine sequence at 10 ms a step; one admission place, a line of 4
ENGINE = ("out=mocker", "--speedup-ratio", "1", "--max-num-seqs", "1")
LINE = ("--max-queued-requests", "1", "--max-waiting-requests", "4")
PRIORITY = ("--scheduling-policy", "priority")


@pytest.fixture(scope="module", params=["run", "frontend"])
def by_priority(request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a server with a line in front of a priority-scheduling
    mocker: `rotor run`, or a `rotor frontend` with one `rotor worker`."""
    if request.param == "run":
        with rotor_server(*ENGINE, *PRIORITY, *LINE) as srv:
            yield srv.url
        return
    with nats_server() as nats:
        worker = start_worker(nats, *ENGINE, *PRIORITY)
        frontend = start_frontend(nats, *LINE)
        try:
            frontend.wait_workers("mock-model", {worker.id})
            yield frontend.url
        finally:
            frontend.proc.stop()
            worker.proc.stop()


def completion(name: str, priority: int, tokens: int = 20, stream: bool = False) -> dict:
    return {
        "model": "mock-model",
        "prompt": name,
        "max_tokens": tokens,
        "ignore_eos": True,
        "priority": priority,
        "stream": stream,
    }


class Client:
    """Requests against one server, and its admission gauges."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.answered: list[str] = []  # names, in the order their answers came back
        self.status: dict[str, int] = {}

    async def ask(self, name: str, priority: int) -> None:
        r = await self.http.post("/v1/completions", json=completion(name, priority))
        self.status[name] = r.status_code
        if r.status_code == 200:
            self.answered.append(name)

    def send(self, name: str, priority: int) -> asyncio.Task[None]:
        return asyncio.create_task(self.ask(name, priority))

    async def gauge(self, name: str) -> float:
        text = (await self.http.get("/metrics")).text
        for line in text.splitlines():
            if line.split(" ")[0] == name:
                return float(line.rpartition(" ")[2])
        raise AssertionError(f"{name} is not in /metrics")

    async def until(self, what: str, check: Callable[[float, float], bool]) -> None:
        """Poll (queued, waiting) until `check` holds; the deadline is a guard
        against a hang, not an expected duration."""
        deadline = time.monotonic() + 30
        while True:
            queued = await self.gauge("rotor_queued_requests")
            waiting = await self.gauge("rotor_waiting_requests")
            if check(queued, waiting):
                return
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)


async def reading(stream: httpx.Response) -> asyncio.Task[None]:
    """The stream read as it comes, in a task of its own, once its first
    chunk is in (it runs: it holds the engine's only sequence). Cancelling
    the task is its client leaving."""
    assert stream.status_code == 200
    first = asyncio.Event()

    async def read() -> None:
        async for line in stream.aiter_lines():
            if line.startswith("data: {"):
                first.set()

    reader = asyncio.create_task(read())
    began = asyncio.create_task(first.wait())
    await asyncio.wait((reader, began), return_when=asyncio.FIRST_COMPLETED)
    began.cancel()
    assert first.is_set(), "the blocker ended before its first chunk"
    return reader


async def line_up(url: str) -> Client:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        client = Client(http)
        long = completion("blocker", 0, tokens=30_000, stream=True)
        async with http.stream("POST", "/v1/completions", json=long) as blocker:
            reader = await reading(blocker)  # it holds the only sequence
            tasks = [client.send("first", 10)]  # takes the one place, waits in the engine
            await client.until("the place taken", lambda q, w: q == 1)
            for i, name in enumerate(("low1", "low2", "low3")):
                tasks.append(client.send(name, 10))
                await client.until(f"{name} in line", lambda q, w, n=i + 1: w == n)
            leaver = client.send("leaver", 5)
            await client.until("the line full", lambda q, w: w == 4)
            tasks.append(client.send("high", 0))  # displaces the worst: low3
            await client.until("low3 refused", lambda q, w: "low3" in client.status)
            leaver.cancel()  # its client goes away while it waits
            await client.until("the leaver out of line", lambda q, w: w == 3)
            assert client.answered == []
            reader.cancel()  # the blocker's client leaves: its sequence frees
        await asyncio.gather(*tasks)
        await client.until("everything admitted", lambda q, w: q == 0 and w == 0)
        return client


def test_the_line_admits_best_priority_first_and_refuses_its_worst(by_priority: str) -> None:
    client = asyncio.run(line_up(by_priority))
    assert client.status["low3"] == 503
    assert client.answered == ["first", "high", "low1", "low2"]
    assert "leaver" not in client.status


def test_a_priority_an_fcfs_engine_would_ignore_is_a_400_before_any_wait() -> None:
    """Every place taken and a request in line: a nonzero priority is refused
    at once (no place frees until the blocker goes, so one that waited
    would time out), and those in line are then served."""

    async def run(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            client = Client(http)
            long = completion("blocker", 0, tokens=30_000, stream=True)
            async with http.stream("POST", "/v1/completions", json=long) as blocker:
                reader = await reading(blocker)
                tasks = [client.send("first", 0)]
                await client.until("the place taken", lambda q, w: q == 1)
                tasks.append(client.send("second", 0))
                await client.until("second in line", lambda q, w: w == 1)
                r = await http.post("/v1/completions", json=completion("x", -1), timeout=10)
                assert r.status_code == 400, r.text
                assert r.json()["error"]["param"] == "priority"
                assert "--scheduling-policy priority" in r.json()["error"]["message"]
                assert await client.gauge("rotor_waiting_requests") == 1
                reader.cancel()  # the blocker's client leaves
            await asyncio.gather(*tasks)
            assert client.answered == ["first", "second"]

    with rotor_server(*ENGINE, *LINE) as srv:
        asyncio.run(run(srv.url))
