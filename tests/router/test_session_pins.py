"""Session affinity (router/sessions.py): pins, their TTL on an injected
clock, what moves a session, and a pool that keeps a session's turns on one
worker under round robin — and moves it when a migration must; and the
same pool's choice for a LoRA adapter (only the workers holding it)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rotor.model.card import ModelCard
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest, pulled
from rotor.protocol.flow import Pump
from rotor.router.modes import RoundRobin
from rotor.router.pool import Pool
from rotor.router.sessions import Sessions

from support.clock import FakeClock
from support.workers import lease


def test_a_pin_lasts_the_ttl_after_its_last_turn() -> None:
    clock = FakeClock(1000.0)
    sessions = Sessions(ttl=10, clock=clock)
    assert sessions.pinned("s") is None
    sessions.pin("s", "a")
    clock.now += 9
    assert sessions.pinned("s") == "a"
    sessions.pin("s", "a")  # another turn: ten more seconds
    clock.now += 9
    assert sessions.pinned("s") == "a"
    clock.now += 1
    assert sessions.pinned("s") is None and len(sessions) == 0


def test_the_oldest_pins_go_first_past_the_capacity() -> None:
    sessions = Sessions(ttl=10, clock=FakeClock(1000.0), capacity=2)
    sessions.pin("s1", "a")
    sessions.pin("s2", "b")
    sessions.pin("s1", "a")  # s1 is now the newest
    sessions.pin("s3", "c")
    assert [sessions.pinned(s) for s in ("s1", "s2", "s3")] == ["a", None, "c"]


def test_a_session_moves_when_its_worker_is_gone_or_overloaded() -> None:
    sessions = Sessions(ttl=10, clock=FakeClock(1000.0))
    assert sessions.choose("s", [lease("a")]) == (None, "new")
    sessions.pin("s", "a")
    a, b = lease("a"), lease("b")
    assert sessions.choose("s", [a, b]) == (a, "pinned")
    assert sessions.choose("s", [b]) == (None, "moved_gone")
    queued = lease("a", waiting=3)
    assert sessions.choose("s", [queued, b]) == (None, "moved_overloaded")
    # every worker queues: moving would not start the turn sooner, so it stays
    assert sessions.choose("s", [queued, lease("b", waiting=1)]) == (queued, "pinned")


class Link:
    """A request plane whose workers answer one token at once; `down` fail."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.down: set[str] = set()

    def generate(
        self, worker_id: str, request: EngineRequest, timeout: float, headers: object = None
    ) -> Pump[EngineOutput]:
        return Pump(self._answer(worker_id))

    async def _answer(self, worker_id: str) -> AsyncIterator[EngineOutput]:
        self.sent.append(worker_id)
        if worker_id in self.down:
            raise EngineError(f"{worker_id} is down", "unavailable", cause="worker_gone")
        yield EngineOutput(token_ids=[7], finish="length")

    def worker_gone(self, worker_id: str) -> None:
        pass

    def release_kv(self, worker_id: str, transfer_id: str) -> None:
        pass


async def turn(pool: Pool, session: str | None) -> None:
    request = EngineRequest("r", "m", [1, 2, 3], session_id=session)
    async for _ in pulled(pool.generate(request)):
        pass


async def test_a_pool_keeps_a_session_on_one_worker_under_round_robin() -> None:
    link = Link()
    pool = Pool(
        ModelCard("m"), link, RoundRobin(), sessions=Sessions(ttl=10, clock=FakeClock(1000.0))
    )
    for wid in ("a", "b", "c"):
        pool.upsert(lease(wid))
    await turn(pool, None)
    await turn(pool, None)
    assert link.sent == ["a", "b"]  # round robin, without a session
    link.sent.clear()
    for _ in range(4):
        await turn(pool, "s")
    assert len(set(link.sent)) == 1  # every turn on the worker of the first
    home = link.sent[0]
    assert pool.stats.sessions == {"new": 1, "pinned": 3}
    # its worker fails mid-turn: the turn migrates, and the session moves with it
    link.down.add(home)
    link.sent.clear()
    await turn(pool, "s")
    moved_to = link.sent[-1]
    assert link.sent[0] == home and moved_to != home
    link.down.clear()
    link.sent.clear()
    await turn(pool, "s")
    assert link.sent == [moved_to]


async def test_a_pool_without_sessions_ignores_the_id() -> None:
    link = Link()
    pool = Pool(ModelCard("m"), link, RoundRobin())
    pool.upsert(lease("a"))
    pool.upsert(lease("b"))
    for _ in range(4):
        await turn(pool, "s")
    assert link.sent == ["a", "b", "a", "b"] and not pool.stats.sessions


async def test_an_adapter_goes_only_to_its_holders_and_is_a_503_when_none_is_live() -> None:
    """A pool routes a LoRA adapter's requests to the workers whose lease
    lists it; it remembers a gone holder's adapter (503, like a model whose
    last worker left) and forgets one unloaded everywhere."""
    link = Link()
    pool = Pool(ModelCard("m"), link, RoundRobin())
    pool.upsert(lease("a"))
    held = lease("b")
    held.loras = {"sql": "/a/sql"}
    pool.upsert(held)
    for _ in range(3):
        async for _ in pulled(pool.generate(EngineRequest("r", "m", [1, 2, 3], lora="sql"))):
            pass
    assert link.sent == ["b", "b", "b"]
    assert pool.adapters() == {"sql": "/a/sql"}
    pool.remove("b")
    assert pool.adapters() == {"sql": "/a/sql"}  # still known: its requests are 503s
    with pytest.raises(EngineError, match="no live worker serves the LoRA adapter 'sql'") as e:
        async for _ in pulled(pool.generate(EngineRequest("r", "m", [1, 2, 3], lora="sql"))):
            pass
    assert e.value.kind == "unavailable"
    pool.upsert(held)
    unloaded = lease("b")
    pool.upsert(unloaded)  # its lease no longer lists it, and no one else holds it
    assert pool.adapters() == {}
