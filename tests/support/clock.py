"""A clock a test moves by hand (`clock.now += 5`): what every injectable
clock in rotor (`clock=` of the planner's fleet, the kv index, session pins,
the request log) gets in tests, so nothing waits on wall time."""

from __future__ import annotations


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
