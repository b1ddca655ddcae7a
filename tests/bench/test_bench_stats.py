"""stats: percentiles and summaries against values computed by hand."""

from __future__ import annotations

import math

import pytest

from rotor.bench.stats import describe, meets_slo, percentile, send_lags, summarize, tpot


def test_percentile_interpolates_between_ranks() -> None:
    s = [1.0, 2.0, 3.0, 4.0]
    # position (n-1)·q/100: p50 → 1.5 → 2.5; p90 → 2.7 → 3.7; p99 → 2.97 → 3.97
    assert percentile(s, 50) == pytest.approx(2.5)
    assert percentile(s, 90) == pytest.approx(3.7)
    assert percentile(s, 99) == pytest.approx(3.97)
    assert percentile(s, 0) == 1.0
    assert percentile(s, 100) == 4.0


def test_percentile_of_one_value_and_errors() -> None:
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_describe_by_hand() -> None:
    d = describe([0.010, 0.030, 0.020, 0.040, 0.100], scale=1e3)  # seconds → ms
    assert d is not None
    assert d["count"] == 5
    assert d["mean"] == pytest.approx(40.0)
    assert d["min"] == pytest.approx(10.0)
    assert d["max"] == pytest.approx(100.0)
    assert d["p50"] == pytest.approx(30.0)
    assert d["p90"] == pytest.approx(76.0)  # 40 + 0.6·(100 - 40)
    assert d["p99"] == pytest.approx(97.6)  # 40 + 0.96·60
    assert d["std"] == pytest.approx(math.sqrt((900 + 100 + 400 + 0 + 3600) / 5))
    assert describe([]) is None


def rec(ttft: float | None, e2e: float, out: int | None, err: str | None = None, **kw) -> dict:
    return {
        "ttft_s": ttft,
        "e2e_s": e2e,
        "itl_s": kw.get("itl", []),
        "prompt_tokens": kw.get("prompt", 10),
        "output_tokens": out,
        "cached_tokens": kw.get("cached", 0),
        "error": {"kind": err, "message": "x"} if err else None,
    }


def test_tpot_excludes_the_first_token() -> None:
    assert tpot(rec(0.1, 1.0, 10)) == pytest.approx(0.1)  # 0.9 s over 9 tokens
    assert tpot(rec(0.1, 0.1, 1)) is None
    assert tpot(rec(0.1, 1.0, 10, "http_500")) is None


def test_slo_every_objective_must_hold() -> None:
    slo = {"ttft": 0.2, "tpot": 0.05}
    assert meets_slo(rec(0.1, 0.5, 9), slo)  # tpot 0.05
    assert not meets_slo(rec(0.3, 0.5, 9), slo)
    assert not meets_slo(rec(0.1, 1.0, 9), slo)  # tpot 0.1125
    assert meets_slo(rec(0.1, 0.1, 1), slo)  # one token: no tpot to miss
    assert not meets_slo(rec(0.1, 0.2, 5, "timeout"), slo)
    assert not meets_slo(rec(0.1, 3.0, 5), {"e2e": 2.0})


def test_summary_counts_usage_errors_and_goodput() -> None:
    records = [
        rec(0.1, 1.0, 10, itl=[0.1, 0.2], prompt=100, cached=50),
        rec(0.2, 2.0, 20, itl=[0.3], prompt=100, cached=0),
        rec(None, 0.5, None, "http_500"),
        rec(0.1, 0.4, None),  # answered, but the server sent no usage
    ]
    s = summarize(records, duration_s=4.0, slo={"ttft": 0.15})
    assert (s["requests"], s["completed"], s["failed"]) == (4, 3, 1)
    assert s["errors"] == {"http_500": 1}
    assert s["without_usage"] == 1
    assert (s["prompt_tokens"], s["output_tokens"], s["cached_tokens"]) == (200, 30, 50)
    assert s["cache_hit_ratio"] == pytest.approx(0.25)
    assert s["request_throughput"] == pytest.approx(0.75)
    assert s["output_throughput"] == pytest.approx(7.5)
    assert s["total_token_throughput"] == pytest.approx(57.5)
    assert s["itl_ms"]["count"] == 3 and s["itl_ms"]["p50"] == pytest.approx(200.0)
    assert s["ttft_ms"]["count"] == 3 and s["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert s["tpot_ms"]["count"] == 2
    assert s["goodput"] == {
        "requests": 2,
        "request_throughput": 0.5,
        "output_tokens": 10,  # the good ones' usage; the one without usage counts none
        "output_throughput": 2.5,
        "fraction": 0.5,
    }
    assert summarize(records, 4.0)["goodput"] is None
    assert s["schedule_lag_ms"] is None and "classes" not in s  # a closed loop's records


def test_itl_objective_is_each_requests_longest_gap() -> None:
    slo = {"itl": 0.05}
    assert meets_slo(rec(0.1, 0.5, 4, itl=[0.01, 0.05, 0.02]), slo)
    assert not meets_slo(rec(0.1, 0.5, 4, itl=[0.01, 0.051, 0.02]), slo)  # one stall is a miss
    assert meets_slo(rec(0.1, 0.1, 1), slo)  # one event: no gap to miss
    assert not meets_slo(rec(0.1, 0.1, 1, "timeout"), slo)
    both = {"ttft": 2.0, "itl": 0.05}
    assert not meets_slo(rec(2.5, 3.0, 4, itl=[0.01]), both)


def test_goodput_at_an_slo_in_requests_and_tokens() -> None:
    records = [
        rec(1.0, 2.0, 100, itl=[0.02] * 99),
        rec(1.5, 2.5, 50, itl=[0.02] * 48 + [0.4]),  # a prefill stalled it once
        rec(3.0, 4.0, 30, itl=[0.01] * 29),  # waited too long for its first token
        rec(0.5, 1.0, 20, itl=[0.03] * 19),
    ]
    g = summarize(records, 10.0, {"ttft": 2.0, "itl": 0.05})["goodput"]
    assert (g["requests"], g["output_tokens"]) == (2, 120)
    assert g["request_throughput"] == pytest.approx(0.2)
    assert g["output_throughput"] == pytest.approx(12.0)
    assert g["fraction"] == 0.5


def test_schedule_lag_and_classes() -> None:
    records = [
        {**rec(0.1, 1.0, 10, itl=[0.1]), "start_s": 1.004, "scheduled_s": 1.0, "class": "long"},
        {**rec(0.1, 1.0, 10, itl=[0.1]), "start_s": 0.002, "scheduled_s": 0.0, "class": "short"},
        {**rec(0.3, 1.0, 10, itl=[0.2]), "start_s": 3.5, "scheduled_s": None, "class": "short"},
    ]
    assert send_lags(records) == pytest.approx([0.004, 0.002])
    s = summarize(records, 5.0, {"ttft": 0.2})
    assert s["schedule_lag_ms"]["count"] == 2
    assert s["schedule_lag_ms"]["max"] == pytest.approx(4.0)
    assert s["schedule_lag_ms"]["p50"] == pytest.approx(3.0)
    assert set(s["classes"]) == {"long", "short"}
    short = s["classes"]["short"]
    assert (short["requests"], short["goodput"]["requests"]) == (2, 1)
    assert short["ttft_ms"]["max"] == pytest.approx(300.0) and "classes" not in short
