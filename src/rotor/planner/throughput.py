"""Throughput mode: each pool sized from a profile (profile.py) so that the
forecast load meets the TTFT and ITL targets.

Symbols: λ = f.rate (requests/s), I = f.isl, O = f.osl (mean prompt and
answer tokens), P = the profile, c_p, c_d = the prefill and decode
corrections, T_ttft, T_itl = the targets (seconds).

Corrections. A profile is measured once, on some day and config; the live
fleet runs slower or faster than it. After every interval with requests:
    p = ttft_p50 / P.ttft(I_obs)
    d = tpot_p50 / P.itl(max(1, n), I_obs + O_obs / 2)
(n = the mean sequences running per decode, or agg, worker), and each factor
is an EWMA (α = 0.5, seeded by its first sample) of its samples, clamped to
[0.5, 2.0] so that one odd interval cannot size the fleet by more than 2×.
A factor whose sample is missing (no TTFT or TPOT samples) keeps its value.

Prefill workers:
    D_p   = λ · I · c_p / P.prefill_throughput(I)
          (workers' worth of prefill time per second)
    ρ_max = clamp(1 − P.ttft(I) / T_ttft, 0.1, 0.9)
          (a pool busy a share ρ of the time makes a new request wait behind
          others; the TTFT target leaves room for T_ttft − P.ttft(I) of wait)
    N_p   = D_p / ρ_max

Decode workers:
    (c*, tps) = P.decode_capacity(T_itl / c_d, I + O / 2)
          (the most streams one worker holds within the corrected ITL target,
          and their tokens/s)
    N_d   = λ · O / tps

Aggregated workers: one worker does both, so the shares of its time add:
    N_agg = N_p + N_d

The results are unrounded; the caller rounds up and applies the guard rails.
`unreachable` says when no number of workers meets a target: more workers
take more requests at once but make none of them faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rotor.planner.observation import Traffic
from rotor.planner.profile import Profile

ALPHA = 0.5  # the corrections' EWMA weight of the newest sample
CLAMP = (0.5, 2.0)  # the corrections' bounds
RHO = (0.1, 0.9)  # the bounds of ρ_max


@dataclass(frozen=True)
class Forecast:
    """The next interval's load, as the predictors see it."""

    rate: float  # requests/s
    isl: float  # mean prompt tokens
    osl: float  # mean answer tokens


@dataclass
class Corrections:
    """How far observed latency is from the profile's (1.0: as profiled)."""

    prefill: float = 1.0
    decode: float = 1.0
    prefill_samples: int = field(default=0, init=False)  # intervals sampled so far
    decode_samples: int = field(default=0, init=False)

    def update(self, profile: Profile, traffic: Traffic, decode_concurrency: float) -> None:
        """Fold in one interval. `decode_concurrency`: the mean sequences
        running per decode (or agg) worker over it."""
        if traffic.requests <= 0:
            return
        ttft = traffic.ttft(0.5)
        if ttft is not None:
            sample = _ratio(ttft, profile.ttft(traffic.isl))
            if sample is not None:
                self.prefill = _fold(self.prefill, sample, self.prefill_samples)
                self.prefill_samples += 1
        tpot = traffic.tpot(0.5)
        if tpot is not None:
            context = traffic.isl + traffic.osl / 2.0
            sample = _ratio(tpot, profile.itl(max(1.0, decode_concurrency), context))
            if sample is not None:
                self.decode = _fold(self.decode, sample, self.decode_samples)
                self.decode_samples += 1


def _ratio(observed: float, profiled: float) -> float | None:
    """observed / profiled, or None when either is no real latency."""
    if not (observed > 0 and profiled > 0 and math.isfinite(observed)):
        return None
    return observed / profiled


def _fold(value: float, sample: float, seen: int) -> float:
    mean = sample if seen == 0 else ALPHA * sample + (1.0 - ALPHA) * value
    return min(max(mean, CLAMP[0]), CLAMP[1])


def prefill_workers(profile: Profile, f: Forecast, c: Corrections, ttft_target: float) -> float:
    """N_p = D_p / ρ_max (module docstring)."""
    _positive("ttft_target", ttft_target)
    if f.rate <= 0 or f.isl <= 0:
        return 0.0
    demand = f.rate * f.isl * c.prefill / profile.prefill_throughput(f.isl)
    rho_max = min(max(1.0 - profile.ttft(f.isl) / ttft_target, RHO[0]), RHO[1])
    return demand / rho_max


def decode_workers(profile: Profile, f: Forecast, c: Corrections, itl_target: float) -> float:
    """N_d = λ · O / tps (module docstring)."""
    _positive("itl_target", itl_target)
    if f.rate <= 0 or f.osl <= 0:
        return 0.0
    _, tps = profile.decode_capacity(itl_target / c.decode, f.isl + f.osl / 2.0)
    return f.rate * f.osl / tps


def agg_workers(
    profile: Profile, f: Forecast, c: Corrections, ttft_target: float, itl_target: float
) -> float:
    """N_agg = N_p + N_d: an aggregated worker spends its time on both."""
    return prefill_workers(profile, f, c, ttft_target) + decode_workers(profile, f, c, itl_target)


def unreachable(profile: Profile, f: Forecast, ttft_target: float, itl_target: float) -> list[str]:
    """Why no number of workers meets the targets at this forecast (empty: they can)."""
    reasons = []
    ttft = profile.ttft(f.isl)
    if ttft > ttft_target:
        reasons.append(
            f"a lone prefill of {f.isl:.0f} prompt tokens takes {ttft * 1000:.0f} ms in the "
            f"profile, over the TTFT target of {ttft_target * 1000:.0f} ms: "
            "more workers cannot make it faster"
        )
    context = f.isl + f.osl / 2.0
    itl = profile.itl(1.0, context)
    if itl > itl_target:
        reasons.append(
            f"one stream with {context:.0f} tokens of context decodes at {itl * 1000:.1f} ms "
            f"per token in the profile, over the ITL target of {itl_target * 1000:.1f} ms: "
            "more workers cannot make it faster"
        )
    return reasons


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value}")
