"""The routing modes: given the live workers of a pool and a request, which
worker serves it. One interface (`Router.choose`), so `kv` is one more mode."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from rotor.protocol.engine import EngineRequest
from rotor.runtime.lease import Lease


@dataclass
class Decision:
    worker_id: str
    # What the response says about it (`x-rotor-worker`, and for kv the overlap).
    headers: dict[str, str] = field(default_factory=dict)
    # Prompt tokens the worker must compute (what its cache does not hold);
    # None: all of them.
    prefill_tokens: int | None = None


class Router(Protocol):
    def choose(self, workers: list[Lease], request: EngineRequest) -> Decision: ...


class RoundRobin:
    def __init__(self) -> None:
        self._next = 0

    def choose(self, workers: list[Lease], request: EngineRequest) -> Decision:
        ordered = sorted(workers, key=lambda w: w.worker_id)
        worker = ordered[self._next % len(ordered)]
        self._next += 1
        return Decision(worker.worker_id)


class Random:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def choose(self, workers: list[Lease], request: EngineRequest) -> Decision:
        ordered = sorted(workers, key=lambda w: w.worker_id)
        return Decision(self._rng.choice(ordered).worker_id)


class LeastLoaded:
    """Fewest active requests (then fewest KV blocks in use) from the load
    workers publish, plus what this frontend sent since their last lease."""

    def __init__(self, in_flight: Callable[[str], int]) -> None:
        self._in_flight = in_flight

    def choose(self, workers: list[Lease], request: EngineRequest) -> Decision:
        def load(w: Lease) -> tuple[int, int, str]:
            state = w.state
            active = max(state.active_requests, self._in_flight(w.worker_id))
            used = state.kv_blocks_total - state.kv_blocks_free
            return active, used, w.worker_id

        return Decision(min(workers, key=load).worker_id)


ROUTER_MODES = ("round_robin", "random", "least_loaded", "kv")
