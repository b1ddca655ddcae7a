"""Each model's answered requests since the last look: counts, token sums,
and samples of time to first token and time per output token. What a
frontend on NATS publishes every second for `rotor planner` (which merges
every frontend's): one record per response, nothing per token.

Samples beyond `SAMPLES` per model in one period are kept by reservoir
sampling, so memory stays fixed whatever the load and whoever reads."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

SAMPLES = 2048


@dataclass
class _Period:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    seen_ttft: int = 0
    seen_tpot: int = 0


def _keep(samples: list[float], seen: int, value: float, rng: random.Random) -> None:
    """Reservoir sampling: every value of the period equally likely to stay."""
    if len(samples) < SAMPLES:
        samples.append(value)
        return
    slot = rng.randrange(seen)
    if slot < SAMPLES:
        samples[slot] = value


class Answers:
    def __init__(self, seed: int | None = None) -> None:
        self._periods: dict[str, _Period] = {}
        self._in_flight: dict[str, int] = {}
        self._rng = random.Random(seed)

    def begin(self, model: str) -> None:
        self._in_flight[model] = self._in_flight.get(model, 0) + 1

    def end(
        self,
        model: str,
        ttft: float | None,
        tpot: float | None,
        prompt_tokens: int,
        completion_tokens: int,
    ) -> None:
        """One response is over: its first-token time (None: no token came)
        and its mean time per token after the first (None: one token or none)."""
        self._in_flight[model] = self._in_flight.get(model, 1) - 1
        period = self._periods.get(model)
        if period is None:
            period = self._periods[model] = _Period()
        period.requests += 1
        period.prompt_tokens += prompt_tokens
        period.completion_tokens += completion_tokens
        if ttft is not None:
            period.seen_ttft += 1
            _keep(period.ttft, period.seen_ttft, ttft, self._rng)
        if tpot is not None:
            period.seen_tpot += 1
            _keep(period.tpot, period.seen_tpot, tpot, self._rng)

    def take(self) -> dict[str, dict[str, Any]]:
        """Every model's period so far (a plain dict, as published), and a new period."""
        periods, self._periods = self._periods, {}
        out: dict[str, dict[str, Any]] = {}
        for model in periods.keys() | self._in_flight.keys():
            p = periods.get(model, _Period())
            out[model] = {
                "requests": p.requests,
                "prompt_tokens": p.prompt_tokens,
                "completion_tokens": p.completion_tokens,
                "ttft": p.ttft,
                "tpot": p.tpot,
                "in_flight": max(0, self._in_flight.get(model, 0)),
            }
        return out
