"""Health and overload in the router (issue 40): a worker whose lease says
its engine failed its canary is not live (discovery keeps it, the pool routes
nothing to it, /health and /metrics name it) until a lease says it answers
again; a new request skips the workers past `--max-kv-usage` or
`--max-prefill-tokens` (router/overload.py), is refused ("overloaded",
counted) when every one is, while a request moving off a failed worker still
takes an overloaded one; a session pinned to an overloaded worker moves."""

from __future__ import annotations

import pytest

from rotor.model.card import ModelCard
from rotor.protocol.engine import EngineError, EngineRequest
from rotor.protocol.lease import Lease
from rotor.router.discovery import Discovery
from rotor.router.modes import RoundRobin
from rotor.router.overload import Overload
from rotor.router.pool import Pool
from rotor.router.sessions import Sessions

from support.clock import FakeClock
from support.link import FakeLink
from support.workers import lease


def sick(wid: str, **state: int) -> Lease:
    worker = lease(wid, **state)
    worker.healthy = False
    return worker


def picks(pool: Pool, n: int = 4, tried: set[str] | None = None) -> list[str]:
    return [
        pool.choose(EngineRequest(f"r{i}", "m", [1]), tried or set()).worker_id for i in range(n)
    ]


async def test_an_unhealthy_worker_is_not_routed_until_it_answers_again() -> None:
    clock = FakeClock(100.0)
    pool = Pool(ModelCard("m"), FakeLink(), RoundRobin())
    discovery = Discovery(lambda *a: pool, None, clock=clock, lease_ttl=5)  # type: ignore[arg-type]
    discovery.pools["m"] = pool
    discovery.compat["m"] = "compat"
    await discovery.on_lease(lease("a"))
    await discovery.on_lease(lease("b"))
    assert sorted(picks(pool)) == ["a", "a", "b", "b"]
    await discovery.on_lease(sick("a"))
    assert picks(pool) == ["b"] * 4
    assert [w.worker_id for w in pool.live()] == ["b"] and pool.unhealthy() == ["a"]
    assert [w["id"] for w in pool.describe()] == ["b"]
    clock.now += 4  # its leases still come: it is known, and not expired
    await discovery.on_lease(sick("a"))
    discovery.expire()
    assert "a" in pool.workers
    await discovery.on_lease(sick("b"))  # both wedged: the model has no live worker
    with pytest.raises(EngineError) as e:
        picks(pool, 1)
    assert e.value.cause == "no_worker"
    await discovery.on_lease(lease("a"))  # its canary answered
    assert picks(pool, 2) == ["a", "a"] and pool.unhealthy() == ["b"]


def overloaded_pool(overload: Overload, *workers: Lease, **kw: object) -> Pool:
    pool = Pool(ModelCard("m"), FakeLink(), RoundRobin(), overload=overload, **kw)  # type: ignore[arg-type]
    for worker in workers:
        pool.upsert(worker)
    return pool


def test_a_worker_past_the_kv_usage_limit_is_skipped() -> None:
    limit = Overload(max_kv_usage=0.8)
    full = lease("a", kv_blocks_total=100, kv_blocks_free=10)  # 0.9 in use
    room = lease("b", kv_blocks_total=100, kv_blocks_free=30)  # 0.7
    pool = overloaded_pool(limit, full, room)
    assert picks(pool) == ["b"] * 4
    assert limit.why(full, pool.load) == "KV usage 0.90 > 0.8"
    assert limit.why(lease("c", kv_blocks_total=100, kv_blocks_free=20), pool.load) is None
    assert limit.why(lease("echo"), pool.load) is None  # an engine that tells no blocks


def test_pending_prefill_counts_the_lease_and_what_this_frontend_sent() -> None:
    limit = Overload(max_prefill_tokens=1000)
    pool = overloaded_pool(limit, lease("a", pending_prefill_tokens=900), lease("b"))
    assert limit.why(pool.workers["a"], pool.load) is None
    pool.load.prefilling["a"] = 200  # sent since its last lease, no output yet
    assert limit.why(pool.workers["a"], pool.load) == "1100 prefill tokens pending > 1000"
    assert picks(pool) == ["b"] * 4


def test_when_every_worker_is_overloaded_a_new_request_is_refused_and_counted() -> None:
    pool = overloaded_pool(
        Overload(max_kv_usage=0.5, max_prefill_tokens=10),
        lease("a", kv_blocks_total=10, kv_blocks_free=1),
        lease("b", pending_prefill_tokens=11),
    )
    with pytest.raises(EngineError, match="every worker of the model 'm' is overloaded") as e:
        picks(pool, 1)
    assert (e.value.kind, e.value.cause) == ("unavailable", "overloaded")
    assert pool.stats.overloaded == 1 and not pool.stats.decisions
    # a request moving off a failed worker ("c", tried) still takes one
    assert picks(pool, 1, tried={"c"}) == ["a"]
    assert pool.stats.overloaded == 1


def test_no_limits_no_skipping() -> None:
    pool = overloaded_pool(Overload(), lease("a", kv_blocks_total=10, kv_blocks_free=0))
    assert pool.overload is None and picks(pool, 2) == ["a", "a"]
    with pytest.raises(ValueError, match="max_kv_usage"):
        Overload(max_kv_usage=1.5)


def test_a_session_pinned_to_an_overloaded_worker_moves() -> None:
    pool = overloaded_pool(
        Overload(max_prefill_tokens=100),
        lease("a"),
        lease("b"),
        sessions=Sessions(ttl=10, clock=FakeClock(1000.0)),
    )
    turn = EngineRequest("t1", "m", [1], session_id="s")
    home = pool.choose(turn, set()).worker_id
    pool.load.prefilling[home] = 500
    moved = pool.choose(EngineRequest("t2", "m", [1], session_id="s"), set()).worker_id
    assert moved != home
    assert pool.stats.sessions == {"new": 1, "moved_overloaded": 1}
