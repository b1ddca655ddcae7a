"""The planner's fleet view: leases and frontend stats folded into intervals."""

from __future__ import annotations

from rotor.planner.fleet import Fleet
from rotor.protocol.engine import EngineState
from rotor.protocol.lease import Lease

from support.clock import FakeClock


def _lease(wid: str, role: str = "agg", status: str = "serving", **state: int) -> Lease:
    return Lease(wid, "m", "card", "compat", f"host:{wid}", status, EngineState(**state), role)  # type: ignore[arg-type]


async def test_interval_means_counters_and_traffic() -> None:
    clock = FakeClock()
    fleet = Fleet(clock, lease_ttl=5.0)
    await fleet.on_lease(_lease("a", active_requests=2, steps=10, simulated_ms=100))
    fleet.observe("m")  # the interval starts
    clock.now = 1.0
    await fleet.on_lease(_lease("a", active_requests=4, steps=20, simulated_ms=300))
    await fleet.on_lease(_lease("a", active_requests=6, steps=30, simulated_ms=500))
    fleet.on_stats(
        "f1",
        {
            "m": {
                "requests": 3,
                "prompt_tokens": 30,
                "completion_tokens": 9,
                "ttft": [0.1, 0.2, 0.3],
                "tpot": [0.01],
                "in_flight": 2,
            }
        },
    )
    fleet.on_stats(
        "f2",
        {
            "m": {
                "requests": 1,
                "prompt_tokens": 10,
                "completion_tokens": 3,
                "ttft": [0.4],
                "tpot": [],
                "in_flight": 1,
            }
        },
    )
    clock.now = 2.0
    obs = fleet.observe("m")
    assert obs.traffic.seconds == 2.0
    assert obs.traffic.requests == 4 and obs.traffic.rate == 2.0
    assert obs.traffic.isl == 10.0 and obs.traffic.osl == 3.0
    assert obs.traffic.frontends == 2 and obs.traffic.in_flight == 3
    assert sorted(obs.traffic.ttft_s) == [0.1, 0.2, 0.3, 0.4]
    [w] = obs.workers
    assert w.active == 5.0  # the interval's two leases
    assert w.steps == 20 and w.step_s == 0.02  # 400 ms over 20 steps
    nxt = fleet.observe("m")
    assert nxt.traffic.requests == 0  # each period counted once


async def test_silent_workers_expire_and_leaving_ones_do_not_serve() -> None:
    clock = FakeClock()
    fleet = Fleet(clock, lease_ttl=5.0)
    await fleet.on_lease(_lease("a"))
    await fleet.on_lease(_lease("b", status="leaving"))
    await fleet.on_lease(_lease("p", role="prefill"))
    obs = fleet.observe("m")
    assert obs.live("agg") == 1 and obs.live("prefill") == 1
    assert {w.worker_id for w in obs.workers} == {"a", "b", "p"}
    clock.now = 6.0
    assert fleet.observe("m").workers == []


def test_malformed_stats_count_for_nothing() -> None:
    fleet = Fleet(FakeClock())
    fleet.on_stats("f", {"m": {"requests": "many"}})
    fleet.on_stats("f", {"m": {"requests": 2, "ttft": [0.5, 0.7]}})
    obs = fleet.observe("m")
    assert obs.traffic.requests == 2 and obs.traffic.ttft_s == [0.5, 0.7]
