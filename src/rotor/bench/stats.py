"""Percentiles, per-request derived latencies, goodput and one level's summary.

Pure functions over plain numbers and the request records the loop produces,
so every figure in results.json can be checked by hand.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

PERCENTILES = (50, 90, 99)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of already sorted values, interpolating
    linearly between closest ranks (numpy's default 'linear' method)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is not within 0..100")
    pos = (len(sorted_values) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def describe(values: Sequence[float], scale: float = 1.0) -> dict[str, float] | None:
    """mean, std, min, p50, p90, p99, max of `values` × `scale`; None when empty."""
    if not values:
        return None
    s = sorted(values)
    n = len(s)
    mean = sum(s) / n
    var = sum((v - mean) ** 2 for v in s) / n
    out = {"count": n, "mean": mean * scale, "std": math.sqrt(var) * scale, "min": s[0] * scale}
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(s, q) * scale
    out["max"] = s[-1] * scale
    return out


def tpot(rec: dict[str, Any]) -> float | None:
    """Time per output token after the first: (e2e - ttft) / (output_tokens - 1)."""
    n = rec.get("output_tokens")
    if rec.get("error") or rec.get("ttft_s") is None or not isinstance(n, int) or n < 2:
        return None
    after_first: float = rec["e2e_s"] - rec["ttft_s"]
    return after_first / (n - 1)


def meets_slo(rec: dict[str, Any], slo: dict[str, float]) -> bool:
    """Whether a successful request met every objective (seconds): ttft, tpot,
    e2e, and itl, which its longest gap between output events must meet (a
    stream that stalled once, for a long prompt's prefill say, stalled for
    its reader)."""
    if rec.get("error"):
        return False
    for key, limit in slo.items():
        if key == "ttft":
            value = rec.get("ttft_s")
        elif key == "e2e":
            value = rec.get("e2e_s")
        elif key == "itl":  # one output event: no gap to miss
            value = max(rec.get("itl_s") or (0.0,))
        else:  # tpot: a one-token answer has none and cannot miss it
            value = tpot(rec)
            if value is None and rec.get("ttft_s") is not None:
                continue
        if value is None or value > limit:
            return False
    return True


def summarize(
    records: list[dict[str, Any]],
    duration_s: float,
    slo: dict[str, float] | None = None,
    per_class: bool = True,
) -> dict[str, Any]:
    """One level's summary. Token counts are the server's usage, summed over
    the requests that reported it; latencies are over successful requests."""
    ok = [r for r in records if not r.get("error")]
    errors = Counter(r["error"]["kind"] for r in records if r.get("error"))
    with_usage = [r for r in ok if r.get("output_tokens") is not None]
    prompt = sum(r["prompt_tokens"] or 0 for r in with_usage)
    output = sum(r["output_tokens"] for r in with_usage)
    cached = sum(r.get("cached_tokens") or 0 for r in with_usage)
    dur = duration_s if duration_s > 0 else math.nan
    itl = [g for r in ok for g in r["itl_s"]]
    tpots = [t for t in (tpot(r) for r in ok) if t is not None]
    summary: dict[str, Any] = {
        "requests": len(records),
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "errors": dict(sorted(errors.items())),
        "without_usage": len(ok) - len(with_usage),
        "duration_s": duration_s,
        "request_throughput": len(ok) / dur,
        "output_throughput": output / dur,
        "total_token_throughput": (prompt + output) / dur,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "cached_tokens": cached,
        "cache_hit_ratio": cached / prompt if prompt else None,
        "ttft_ms": describe([r["ttft_s"] for r in ok if r["ttft_s"] is not None], 1e3),
        "tpot_ms": describe(tpots, 1e3),
        "itl_ms": describe(itl, 1e3),
        "e2e_ms": describe([r["e2e_s"] for r in ok], 1e3),
        "goodput": None,
    }
    if slo:
        good = [r for r in records if meets_slo(r, slo)]
        good_tokens = sum(r.get("output_tokens") or 0 for r in good)
        summary["goodput"] = {
            "requests": len(good),
            "request_throughput": len(good) / dur,
            "output_tokens": good_tokens,
            "output_throughput": good_tokens / dur,
            "fraction": len(good) / len(records) if records else None,
        }
    summary["schedule_lag_ms"] = describe(send_lags(records), 1e3)
    if any(r.get("images") for r in records):
        summary["images"] = image_totals(records)
    if per_class and any(r.get("class") for r in records):
        summary["classes"] = by_class(records, duration_s, slo)
    return summary


def image_totals(records: list[dict[str, Any]]) -> dict[str, int]:
    """The images the requests sent (failed ones too: they were sent), the
    PNG bytes, and how many were the pool's again."""
    return {
        "sent": sum(r.get("images") or 0 for r in records),
        "bytes": sum(r.get("image_bytes") or 0 for r in records),
        "reused": sum(r.get("images_reused") or 0 for r in records),
        "requests_with_images": sum(1 for r in records if r.get("images")),
    }


def by_class(
    records: list[dict[str, Any]], duration_s: float, slo: dict[str, float] | None
) -> dict[str, Any]:
    """Each --mix class's own summary (same fields, over its requests alone)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(r.get("class") or "", []).append(r)
    return {
        name: summarize(recs, duration_s, slo, per_class=False)
        for name, recs in sorted(groups.items())
    }


def send_lags(records: list[dict[str, Any]]) -> list[float]:
    """Seconds each request of an open loop's schedule was sent after its
    time (first turns only: later turns follow their answers, not a clock)."""
    return [r["start_s"] - r["scheduled_s"] for r in records if r.get("scheduled_s") is not None]
