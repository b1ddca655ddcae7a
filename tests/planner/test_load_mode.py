"""Load mode's sizing rule and the guard rails, on hand-made observations."""

from __future__ import annotations

from rotor.planner.guard import Guard, Limits
from rotor.planner.load import LoadSizer, MissMemory, PoolMemory, Proposal, size_pool
from rotor.planner.observation import Observation, Traffic, WorkerLoad


def _obs(
    n: int,
    active: float,
    ttft: float | None = None,
    tpot: float | None = None,
    tokens_per_s: float = 0.0,
) -> Observation:
    traffic = Traffic(
        seconds=10.0,
        requests=10,
        prompt_tokens=int(tokens_per_s * 10),
        ttft_s=[ttft] * 10 if ttft is not None else [],
        tpot_s=[tpot] * 10 if tpot is not None else [],
    )
    workers = [WorkerLoad(f"w{i}", "agg", f"h:{i}", active=active) for i in range(n)]
    return Observation(0.0, traffic, workers)


def test_a_missed_ttft_scales_up_in_proportion_at_most_doubling() -> None:
    p = size_pool(_obs(2, 4, ttft=0.75), "agg", 0.5, 0.05, PoolMemory())
    assert p.workers == 3  # ceil(2 × 1.5)
    p = size_pool(_obs(2, 4, ttft=5.0), "agg", 0.5, 0.05, PoolMemory())
    assert p.workers == 4  # r = 10, capped at 2n


def test_within_tolerance_holds() -> None:
    assert size_pool(_obs(3, 4, ttft=0.52), "agg", 0.5, 0.05, PoolMemory()).workers == 3


def test_headroom_scales_down_by_one() -> None:
    assert size_pool(_obs(4, 1, ttft=0.05, tpot=0.005), "agg", 0.5, 0.05, PoolMemory()).workers == 3


def test_a_remembered_miss_stops_a_scale_down_into_it() -> None:
    memory = PoolMemory()
    size_pool(_obs(2, 10, ttft=1.0), "agg", 0.5, 0.05, memory)  # missed at 10 per worker
    assert memory.queue.load == 10
    # latency is flat again, but 3 workers at 6 each would be 9 each on 2: ≥ 0.8 × 10
    p = size_pool(_obs(3, 6, ttft=0.05), "agg", 0.5, 0.05, memory)
    assert p.workers == 3
    # and a load that nears the miss scales up before latency shows it
    p = size_pool(_obs(3, 9, ttft=0.05), "agg", 0.5, 0.05, memory)
    assert p.workers == 4


def test_the_sla_met_above_a_miss_raises_the_remembered_limit() -> None:
    memory = PoolMemory(queue=MissMemory(load=5, missed_last=True))
    p = size_pool(_obs(2, 8, ttft=0.1), "agg", 0.5, 0.05, memory)
    assert memory.queue.load == 8
    # held at 8: no reason to scale up ahead of a miss at 8 (that would be a miss it never saw)
    assert p.workers == 2 and not memory.queue.missed_last


def test_the_token_rate_s_memory_stops_a_scale_down_the_queue_would_allow() -> None:
    """The queue is short again, but the tokens per second are what broke the
    SLA: 3 workers at 350 tok/s each would be 525 each on 2, over 0.8 × 500."""
    memory = PoolMemory()
    size_pool(_obs(2, 10, ttft=1.0, tokens_per_s=1000), "agg", 0.5, 0.05, memory)
    assert memory.rate.load == 500
    p = size_pool(_obs(3, 1, ttft=0.05, tokens_per_s=1050), "agg", 0.5, 0.05, memory)
    assert p.workers == 3 and "holds" in p.reason
    # 400 each on 3 is 0.8 of where it broke: one more worker before latency shows it
    p = size_pool(_obs(3, 1, ttft=0.05, tokens_per_s=1200), "agg", 0.5, 0.05, memory)
    assert p.workers == 4 and "near where the SLA broke" in p.reason
    # at 600 tok/s in all, 2 workers would carry 300 each: down
    p = size_pool(_obs(3, 1, ttft=0.05, tokens_per_s=600), "agg", 0.5, 0.05, memory)
    assert p.workers == 2


def test_the_rate_counts_each_pool_s_own_tokens() -> None:
    from rotor.planner.load import pool_rate

    traffic = Traffic(seconds=2.0, requests=4, prompt_tokens=800, completion_tokens=200)
    assert pool_rate(traffic, "prefill") == 400
    assert pool_rate(traffic, "decode") == 100
    assert pool_rate(traffic, "agg") == 500


def test_decode_pool_reads_itl_and_prefill_pool_ttft() -> None:
    obs = Observation(
        0.0,
        Traffic(10.0, 10, ttft_s=[2.0] * 10, tpot_s=[0.01] * 10),
        [WorkerLoad("p", "prefill", "h:1"), WorkerLoad("d", "decode", "h:2")],
    )
    sizer = LoadSizer(0.5, 0.05)
    wants = {p.pool: p.workers for p in sizer.propose(obs, ("prefill", "decode"))}
    assert wants == {"prefill": 2, "decode": 1}


def _p(n: int) -> list[Proposal]:
    return [Proposal("agg", n, "test")]


def test_guard_bounds_and_gpu_budget() -> None:
    g = Guard(Limits(min_workers=1, max_workers=4, gpus_per_worker=2, max_gpus=10))
    assert g.bounded({"agg": 9}) == {"agg": 4}
    assert g.bounded({"agg": 0}) == {"agg": 1}
    assert g.bounded({"prefill": 4, "decode": 4}) == {"prefill": 2, "decode": 2}  # 5 workers fit


def test_guard_scale_down_needs_streak_and_cooldown() -> None:
    g = Guard(Limits(min_workers=1, max_workers=8, cooldown=60.0, down_intervals=3))
    changes, _ = g.review(_p(4), {"agg": 2}, now=0.0)
    assert [(c.target, c.action) for c in changes] == [(4, "up")]
    g.acted(changes, {"agg": 2}, 0.0)
    assert not g.settled({"agg": 3}, 5.0)  # in flight until the pool shows 4
    assert g.settled({"agg": 4}, 10.0)
    for t in (20.0, 30.0, 40.0):  # wanted 3 times, but within the cool-down
        changes, held = g.review(_p(1), {"agg": 4}, now=t)
        assert changes == []
    assert any("cool-down" in h for h in held)
    changes, _ = g.review(_p(1), {"agg": 4}, now=70.0)
    assert [(c.target, c.action) for c in changes] == [(3, "down")]  # one at a time


def test_guard_gives_up_on_an_action_that_never_settles() -> None:
    g = Guard(Limits(settle_timeout=30.0))
    changes, _ = g.review(_p(3), {"agg": 1}, now=0.0)
    g.acted(changes, {"agg": 1}, 0.0)
    assert not g.settled({"agg": 2}, 29.0)
    assert g.settled({"agg": 2}, 31.0)
    assert g.timeouts == {"agg": 1}


def test_a_steady_load_does_not_flap() -> None:
    """Wanted down once, then not: the streak restarts, nothing changes."""
    g = Guard(Limits(down_intervals=3, cooldown=0.0))
    for t, want in enumerate([2, 3, 2, 3, 2, 3, 2, 3]):
        changes, _ = g.review(_p(want), {"agg": 3}, now=float(t))
        assert changes == []
