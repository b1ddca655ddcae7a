"""Conditional disaggregation (router/disagg.py): each policy's decision on
constructed prompts, with its reason."""

from __future__ import annotations

import pytest

from rotor.router.disagg import BUSY_BUDGETS, FALLBACK_BUDGET, DisaggPolicy, Placement

IDLE = [(0, 8192)]  # one prefill worker, nothing queued, a budget of 8192 tokens a step
BUSY = [(4 * 8192 + 1, 8192)]


@pytest.mark.parametrize(
    ("policy", "prompt", "cached", "queues", "expected"),
    [
        # always: remote whenever there is a prefill worker
        ("always", 10, 0, IDLE, Placement("remote", "always")),
        ("always", 10, 0, BUSY, Placement("remote", "always")),
        ("always", 10_000, 0, [], Placement("local", "no_prefill_worker")),
        # isl: the effective prompt (less the decode worker's cache) and the cached share
        ("isl", 2047, 0, IDLE, Placement("local", "short")),
        ("isl", 2048, 0, IDLE, Placement("remote", "long")),
        ("isl", 10_000, 8_000, IDLE, Placement("local", "short")),  # 2000 to compute
        ("isl", 20_000, 14_000, IDLE, Placement("local", "cached")),  # 6000 left, but 70 % held
        ("isl", 20_000, 13_000, IDLE, Placement("remote", "long")),  # 65 %
        ("isl", 20_000, 0, BUSY, Placement("remote", "long")),  # isl alone ignores load
        # load: every prefill worker busier than the threshold
        ("load", 100, 0, IDLE, Placement("remote", "idle")),
        ("load", 100_000, 0, BUSY, Placement("local", "busy")),
        ("load", 100_000, 0, [*BUSY, (0, 8192)], Placement("remote", "idle")),  # one is free
        # isl_or_load: local when either says so
        ("isl_or_load", 100, 0, IDLE, Placement("local", "short")),
        ("isl_or_load", 100_000, 0, BUSY, Placement("local", "busy")),
        ("isl_or_load", 100_000, 0, IDLE, Placement("remote", "long")),
    ],
)
def test_each_policy_decides_with_its_reason(
    policy: str, prompt: int, cached: int, queues: list, expected: Placement
) -> None:
    assert DisaggPolicy(policy).decide(prompt, cached, queues) == expected  # type: ignore[arg-type]


def test_the_default_prefills_remotely_unless_every_prefill_worker_is_busy() -> None:
    default = DisaggPolicy()
    assert default.decide(100, 0, IDLE) == Placement("remote", "idle")  # short prompts too
    assert default.decide(100_000, 0, BUSY) == Placement("local", "busy")
    assert default.decide(100_000, 0, []) == Placement("local", "no_prefill_worker")


def test_busy_is_measured_in_the_workers_own_step_budget_or_a_threshold() -> None:
    policy = DisaggPolicy("load")
    assert not policy.busy(BUSY_BUDGETS * 1000, 1000)
    assert policy.busy(BUSY_BUDGETS * 1000 + 1, 1000)
    assert policy.busy(BUSY_BUDGETS * FALLBACK_BUDGET + 1, 0)  # a worker that says no budget
    fixed = DisaggPolicy("load", busy_tokens=500)
    assert fixed.busy(501, 10**6) and not fixed.busy(500, 1)


def test_enforced_is_always_remote_and_bad_settings_are_refused() -> None:
    assert DisaggPolicy("isl", enforce=True).decide(10, 0, IDLE) == Placement("remote", "always")
    assert DisaggPolicy("isl", enforce=True).decide(10, 0, []).where == "local"  # none: a 503
    for bad in (
        {"policy": "sometimes"},
        {"min_tokens": -1},
        {"max_cached_ratio": 1.5},
        {"busy_tokens": -2},
    ):
        with pytest.raises(ValueError):
            DisaggPolicy(**bad)  # type: ignore[arg-type]
