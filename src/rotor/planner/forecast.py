"""Throughput mode over a model's pools: predict the next interval's rate
and lengths (predict.py), correct the profile by what latency was observed
(throughput.Corrections), and size each pool by throughput.py's formulas."""

from __future__ import annotations

import logging
import math

from rotor.planner.load import Proposal
from rotor.planner.metrics import PlannerMetrics
from rotor.planner.observation import Observation, PoolName
from rotor.planner.predict import make_predictor
from rotor.planner.profile import Profile
from rotor.planner.throughput import (
    Corrections,
    Forecast,
    agg_workers,
    decode_workers,
    prefill_workers,
    unreachable,
)

log = logging.getLogger("rotor.planner")


class ThroughputSizer:
    def __init__(
        self,
        profile: Profile,
        predictor: str,
        ttft: float,
        itl: float,
        metrics: PlannerMetrics | None = None,
    ) -> None:
        self.profile = profile
        self.ttft = ttft
        self.itl = itl
        self.metrics = metrics
        self.rate = make_predictor(predictor)
        self.isl = make_predictor(predictor)
        self.osl = make_predictor(predictor)
        self.corrections = Corrections()
        self._warned: set[str] = set()

    def forecast(self, obs: Observation) -> Forecast:
        t = obs.traffic
        if t.seconds > 0:
            self.rate.observe(t.rate)
        if t.requests:  # lengths only move when requests say something about them
            self.isl.observe(t.isl)
            self.osl.observe(t.osl)
        return Forecast(self.rate.predict(), self.isl.predict(), self.osl.predict())

    def propose(self, obs: Observation, pools: tuple[PoolName, ...]) -> list[Proposal]:
        decoding = [w for w in obs.workers if w.pool in ("agg", "decode") and not w.leaving]
        per_worker = sum(w.running for w in decoding) / len(decoding) if decoding else 0.0
        self.corrections.update(self.profile, obs.traffic, per_worker)
        f = self.forecast(obs)
        if self.metrics is not None:
            self.metrics.predicted.labels("requests_per_second").set(f.rate)
            self.metrics.predicted.labels("isl").set(f.isl)
            self.metrics.predicted.labels("osl").set(f.osl)
        for reason in unreachable(self.profile, f, self.ttft, self.itl) if f.rate else []:
            if reason not in self._warned:
                self._warned.add(reason)
                log.warning("the targets cannot be met by scaling: %s", reason)
        c = self.corrections
        why = (
            f"predicted {f.rate:.2f} req/s, isl {f.isl:.0f}, osl {f.osl:.0f}; "
            f"corrections prefill {c.prefill:.2f}, decode {c.decode:.2f}"
        )
        sized: dict[PoolName, float] = {}
        if "agg" in pools:
            sized["agg"] = agg_workers(self.profile, f, c, self.ttft, self.itl)
        if "prefill" in pools:
            sized["prefill"] = prefill_workers(self.profile, f, c, self.ttft)
        if "decode" in pools:
            sized["decode"] = decode_workers(self.profile, f, c, self.itl)
        return [
            Proposal(p, math.ceil(n - 1e-9), f"{why}: {n:.2f} workers") for p, n in sized.items()
        ]
