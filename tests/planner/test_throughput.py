"""Throughput mode's formulas on hand-made profiles with round numbers."""

from __future__ import annotations

import pytest

from rotor.planner.observation import Traffic
from rotor.planner.profile import DecodePoint, PrefillPoint, Profile
from rotor.planner.throughput import (
    Corrections,
    Forecast,
    agg_workers,
    decode_workers,
    prefill_workers,
    unreachable,
)


def make_profile() -> Profile:
    # prefill: 0.1 ms per prompt token (10 000 tokens/s at any length)
    # decode: itl(c) = 10 ms + 1 ms per stream, at every context
    return Profile(
        model="m",
        prefill=[PrefillPoint(1000, 0.1), PrefillPoint(2000, 0.2)],
        decode=[DecodePoint(c, ctx, 0.010 + 0.001 * c) for c in (1, 16, 32) for ctx in (500, 4000)],
    )


F = Forecast(rate=50.0, isl=1000.0, osl=200.0)


# -- prefill ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ttft_target", "expected"),
    [
        (0.5, 5.0 / 0.8),  # D_p = 50 · 1000 / 10 000 = 5; ρ_max = 1 − 0.1 / 0.5
        (0.2, 5.0 / 0.5),
        (0.105, 5.0 / 0.1),  # ρ_max 0.048 → held at 0.1
        (0.1, 5.0 / 0.1),
        (10.0, 5.0 / 0.9),  # ρ_max 0.99 → held at 0.9
    ],
)
def test_prefill_workers(ttft_target: float, expected: float) -> None:
    assert prefill_workers(make_profile(), F, Corrections(), ttft_target) == pytest.approx(expected)


def test_prefill_workers_scale_with_rate_and_length() -> None:
    p, c = make_profile(), Corrections()
    base = prefill_workers(p, F, c, 0.5)
    assert prefill_workers(p, Forecast(100.0, 1000.0, 200.0), c, 0.5) == pytest.approx(2 * base)
    # twice the prompt: twice the work, and a longer lone prefill leaves less room to wait
    assert prefill_workers(p, Forecast(50.0, 2000.0, 200.0), c, 0.5) == pytest.approx(10.0 / 0.6)


def test_prefill_correction_moves_the_result() -> None:
    p = make_profile()
    assert prefill_workers(p, F, Corrections(prefill=1.5), 0.5) == pytest.approx(1.5 * 5.0 / 0.8)
    assert prefill_workers(p, F, Corrections(prefill=0.5), 0.5) == pytest.approx(0.5 * 5.0 / 0.8)


# -- decode -----------------------------------------------------------------------


def test_decode_workers() -> None:
    # itl target 30 ms: c* = 20 streams, tps = 20 / 0.030; N_d = 50 · 200 / tps = 15
    assert decode_workers(make_profile(), F, Corrections(), 0.030) == pytest.approx(15.0, rel=1e-5)


def test_decode_correction_moves_the_result() -> None:
    p = make_profile()
    # observed 1.5× slower: target 20 ms in the profile's terms, c* = 10, tps = 500, N_d = 20
    slower = decode_workers(p, F, Corrections(decode=1.5), 0.030)
    assert slower == pytest.approx(20.0, rel=1e-5)
    # observed faster: target 60 ms, c* = 50, tps = 50 / 0.06, N_d = 12
    faster = decode_workers(p, F, Corrections(decode=0.5), 0.030)
    assert faster == pytest.approx(12.0, rel=1e-5)


def test_decode_workers_when_one_stream_misses() -> None:
    # one stream already takes 11 ms: each worker decodes one stream, 1 / 0.011 tokens/s
    got = decode_workers(make_profile(), F, Corrections(), 0.005)
    assert got == pytest.approx(50.0 * 200.0 * 0.011)


# -- agg --------------------------------------------------------------------------


def test_agg_workers_add_the_shares() -> None:
    got = agg_workers(make_profile(), F, Corrections(), 0.5, 0.030)
    assert got == pytest.approx(5.0 / 0.8 + 15.0, rel=1e-5)


# -- no load ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "f",
    [Forecast(0.0, 1000.0, 200.0), Forecast(0.0, 0.0, 0.0), Forecast(5.0, 0.0, 0.0)],
)
def test_no_load_no_workers(f: Forecast) -> None:
    p, c = make_profile(), Corrections()
    assert prefill_workers(p, f, c, 0.5) == 0.0
    assert decode_workers(p, f, c, 0.03) == 0.0
    assert agg_workers(p, f, c, 0.5, 0.03) == 0.0


def test_bad_targets() -> None:
    p, c = make_profile(), Corrections()
    with pytest.raises(ValueError, match="ttft_target must be positive"):
        prefill_workers(p, F, c, 0.0)
    with pytest.raises(ValueError, match="itl_target must be positive"):
        decode_workers(p, F, c, -1.0)


# -- corrections ------------------------------------------------------------------


def traffic(ttft: list[float], tpot: list[float], requests: int = 10) -> Traffic:
    # mean prompt 1000, answer 200: profile ttft 0.1 s; context 1100
    return Traffic(
        seconds=10.0,
        requests=requests,
        prompt_tokens=1000 * requests,
        completion_tokens=200 * requests,
        ttft_s=ttft,
        tpot_s=tpot,
    )


def test_corrections_first_sample_then_ewma() -> None:
    p, c = make_profile(), Corrections()
    # p50 ttft 0.15 against 0.1; p50 tpot 30 ms against itl(10) = 20 ms
    c.update(p, traffic([0.1, 0.15, 0.9], [0.03, 0.03, 0.01, 0.05, 0.03]), 10.0)
    assert c.prefill == pytest.approx(1.5)
    assert c.decode == pytest.approx(1.5)
    c.update(p, traffic([0.1], [0.02]), 10.0)  # as profiled
    assert c.prefill == pytest.approx(1.25)
    assert c.decode == pytest.approx(1.25)
    assert (c.prefill_samples, c.decode_samples) == (2, 2)


def test_corrections_clamped() -> None:
    p, c = make_profile(), Corrections()
    c.update(p, traffic([1.0], [0.001]), 10.0)  # 10× slower prefill, 20× faster decode
    assert (c.prefill, c.decode) == (2.0, 0.5)
    c.update(p, traffic([1.0], [0.001]), 10.0)
    assert (c.prefill, c.decode) == (2.0, 0.5)
    c.update(p, traffic([0.1], [0.02]), 10.0)  # back to the profile: halfway from the bound
    assert c.prefill == pytest.approx(1.5)
    assert c.decode == pytest.approx(0.75)


def test_corrections_skip_missing_samples() -> None:
    p, c = make_profile(), Corrections()
    c.update(p, traffic([], [0.03]), 10.0)
    assert c.prefill == 1.0
    assert c.decode == pytest.approx(1.5)
    c.update(p, traffic([0.2], []), 10.0)
    assert c.prefill == pytest.approx(2.0)
    assert c.decode == pytest.approx(1.5)
    assert (c.prefill_samples, c.decode_samples) == (1, 1)


def test_corrections_skip_an_idle_interval() -> None:
    p, c = make_profile(), Corrections(prefill=1.2, decode=0.8)
    c.update(p, traffic([0.5], [0.5], requests=0), 10.0)
    assert (c.prefill, c.decode) == (1.2, 0.8)


def test_corrections_decode_concurrency_at_least_one() -> None:
    p, c = make_profile(), Corrections()
    c.update(p, traffic([0.1], [0.0165]), 0.2)  # compared with itl(1) = 11 ms
    assert c.decode == pytest.approx(1.5)


def test_corrections_decode_context_is_prompt_plus_half_the_answer() -> None:
    # ITL 20 ms at context 1000, 40 ms at 2000, whatever the concurrency
    p = Profile(
        "m",
        [PrefillPoint(1000, 0.1)],
        [DecodePoint(c, ctx, ctx * 2e-5) for c in (1, 16) for ctx in (1000, 2000)],
    )
    c = Corrections()
    t = Traffic(seconds=1.0, requests=4, prompt_tokens=4000, completion_tokens=4000, tpot_s=[0.045])
    c.update(p, t, 8.0)  # context 1000 + 1000 / 2: profile ITL 30 ms
    assert c.decode == pytest.approx(1.5)


def test_corrections_feed_the_sizing() -> None:
    p, c = make_profile(), Corrections()
    before = agg_workers(p, F, c, 0.5, 0.030)
    c.update(p, traffic([0.15], [0.03]), 10.0)  # the fleet runs 1.5× slower than profiled
    assert agg_workers(p, F, c, 0.5, 0.030) > before


# -- unreachable ------------------------------------------------------------------


def test_reachable_targets_have_no_reasons() -> None:
    assert unreachable(make_profile(), F, 0.5, 0.030) == []


def test_unreachable_ttft() -> None:
    reasons = unreachable(make_profile(), F, 0.05, 0.030)
    assert len(reasons) == 1
    assert "1000 prompt tokens" in reasons[0]
    assert "100 ms" in reasons[0]
    assert "TTFT target of 50 ms" in reasons[0]


def test_unreachable_itl() -> None:
    reasons = unreachable(make_profile(), F, 0.5, 0.005)
    assert len(reasons) == 1
    assert "1100 tokens of context" in reasons[0]
    assert "11.0 ms" in reasons[0]
    assert "ITL target of 5.0 ms" in reasons[0]


def test_unreachable_both() -> None:
    reasons = unreachable(make_profile(), F, 0.05, 0.005)
    assert [r.split(" ")[0:2] for r in reasons] == [["a", "lone"], ["one", "stream"]]
