"""Discovery (router/discovery.py): a worker unheard for the lease TTL is
dropped, a leaving one takes no new requests, a card that disagrees is refused."""

from __future__ import annotations

from rotor.model.card import ModelCard
from rotor.protocol.lease import Lease
from rotor.router.discovery import Discovery
from rotor.router.modes import RoundRobin
from rotor.router.pool import Pool

from support.workers import FakeInbox, lease


async def test_a_worker_unheard_for_the_ttl_is_dropped() -> None:
    now = [100.0]
    inbox = FakeInbox()
    pool = Pool(ModelCard("m"), inbox, RoundRobin())  # type: ignore[arg-type]
    discovery = Discovery(lambda *a: pool, None, clock=lambda: now[0], lease_ttl=5)  # type: ignore[arg-type]
    discovery.pools["m"] = pool
    discovery.compat["m"] = "compat"
    await discovery.on_lease(lease("w1"))
    await discovery.on_lease(lease("w2"))
    now[0] += 3
    await discovery.on_lease(lease("w2"))  # w2 renews, w1 does not
    now[0] += 3
    discovery.expire()
    assert set(pool.workers) == {"w2"} and inbox.gone == ["w1"]
    leaving = lease("w2")
    leaving.status = "leaving"
    await discovery.on_lease(leaving)
    assert pool.live() == [] and "w2" in pool.workers  # its running requests go on
    other = Lease("w3", "m", "card", "other-compat", "h:3")
    await discovery.on_lease(other)
    assert "w3" not in pool.workers  # a card that disagrees is refused


async def test_a_worker_found_gone_leaves_its_pool_at_once_and_a_lease_brings_it_back() -> None:
    """The request plane found nobody serving w1 (NATS: no responders): it
    leaves the pool before its lease runs out; a worker that was only cut off
    from NATS a moment comes back with its next lease."""
    inbox = FakeInbox()
    pool = Pool(ModelCard("m"), inbox, RoundRobin())  # type: ignore[arg-type]
    discovery = Discovery(lambda *a: pool, None, clock=lambda: 100.0)  # type: ignore[arg-type]
    discovery.pools["m"] = pool
    discovery.compat["m"] = "compat"
    await discovery.on_lease(lease("w1"))
    await discovery.on_lease(lease("w2"))
    discovery.gone("w1")
    assert set(pool.workers) == {"w2"} and inbox.gone == ["w1"]
    discovery.gone("w1")  # (told twice: once is enough)
    discovery.gone("unknown")
    assert inbox.gone == ["w1"]
    await discovery.on_lease(lease("w1"))
    assert set(pool.workers) == {"w1", "w2"}
