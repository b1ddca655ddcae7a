"""The routing modes: given the live workers of a pool and a request, which
worker serves it. One interface (`Router.choose`), so `kv` is one more mode.

A router is built on its own and given, at each decision, what the pool
knows that the workers' leases cannot show yet (`LocalLoad`: what this
frontend sent since their last lease).
"""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from rotor.protocol.engine import EngineRequest
from rotor.protocol.lease import Lease


@dataclass
class Pick:
    """A router's pick: the worker that serves a request."""

    worker_id: str
    # What the response says about it (`x-rotor-worker`, and for kv the overlap).
    headers: dict[str, str] = field(default_factory=dict)
    # Prompt tokens the worker must compute (what its cache does not hold);
    # None: all of them.
    prefill_tokens: int | None = None


@dataclass
class LocalLoad:
    """Per worker: requests this frontend has running on it, and prompt
    tokens it sent that have not produced output yet."""

    in_flight: collections.Counter[str] = field(default_factory=collections.Counter)
    prefilling: collections.Counter[str] = field(default_factory=collections.Counter)

    def sent(self, worker: str, request: EngineRequest, pick: Pick) -> int:
        """A request sent to `worker`, counted; the prompt tokens it must
        compute (counted until its first output: `prefilled`)."""
        self.in_flight[worker] += 1
        prefill = pick.prefill_tokens
        prefill = len(request.token_ids) if prefill is None else prefill
        self.prefilling[worker] += prefill
        return prefill

    def prefilled(self, worker: str, tokens: int) -> None:
        """`tokens` of the worker's prompts are computed (a first output came)."""
        prefilling = self.prefilling
        prefilling[worker] -= tokens
        if prefilling[worker] <= 0:
            del prefilling[worker]

    def done(self, worker: str, prefill: int) -> None:
        """A request on `worker` is over (`prefill`: its prompt tokens still
        counted as not computed)."""
        self.prefilled(worker, prefill)
        in_flight = self.in_flight
        in_flight[worker] -= 1
        if in_flight[worker] <= 0:
            del in_flight[worker]


class Router(Protocol):
    def choose(self, workers: list[Lease], request: EngineRequest, load: LocalLoad) -> Pick: ...


@runtime_checkable
class WorkerState(Protocol):
    """A router that keeps state per worker, forgotten when the worker goes."""

    def remove_worker(self, worker: str) -> None: ...


class RoundRobin:
    def __init__(self) -> None:
        self._next = 0

    def choose(self, workers: list[Lease], request: EngineRequest, load: LocalLoad) -> Pick:
        ordered = sorted(workers, key=lambda w: w.worker_id)
        worker = ordered[self._next % len(ordered)]
        self._next += 1
        return Pick(worker.worker_id)


class Random:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def choose(self, workers: list[Lease], request: EngineRequest, load: LocalLoad) -> Pick:
        ordered = sorted(workers, key=lambda w: w.worker_id)
        return Pick(self._rng.choice(ordered).worker_id)


class LeastLoaded:
    """Fewest active requests (then fewest KV blocks in use) from the load
    workers publish, or what this frontend sent since their last lease."""

    def choose(self, workers: list[Lease], request: EngineRequest, load: LocalLoad) -> Pick:
        in_flight = load.in_flight

        def weight(w: Lease) -> tuple[int, int, str]:
            state = w.state
            active = max(state.active_requests, in_flight[w.worker_id])
            used = state.kv_blocks_total - state.kv_blocks_free
            return active, used, w.worker_id

        return Pick(min(workers, key=weight).worker_id)


ROUTER_MODES = ("round_robin", "random", "least_loaded", "kv")
