"""The planner's predictors: what each makes of constant, ramping, stepping,
falling and autoregressive series."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.planner.predict import PREDICTORS, Arima, Holt, make_predictor, solve


def feed(name: str, values: list[float]) -> float:
    p = make_predictor(name)
    for v in values:
        p.observe(v)
    return p.predict()


@pytest.mark.parametrize("name", PREDICTORS)
def test_nothing_observed_predicts_zero(name: str) -> None:
    assert make_predictor(name).predict() == 0.0


@pytest.mark.parametrize("name", PREDICTORS)
def test_constant_series_converges(name: str) -> None:
    assert feed(name, [7.5] * 40) == pytest.approx(7.5, rel=1e-9)


@pytest.mark.parametrize("name", PREDICTORS)
def test_converges_after_noise(name: str) -> None:
    # whatever came before, a long constant run is predicted as itself
    rng = random.Random(1)
    noisy = [rng.uniform(0, 50) for _ in range(20)]
    assert feed(name, noisy + [12.0] * 60) == pytest.approx(12.0, rel=1e-3)


def ramp(n: int, start: float = 10.0, slope: float = 2.5) -> list[float]:
    return [start + slope * i for i in range(n)]


@pytest.mark.parametrize("name", ["holt", "arima"])
def test_ramp_is_followed(name: str) -> None:
    values = ramp(30)
    assert feed(name, values) == pytest.approx(ramp(31)[-1], rel=0.02)


@pytest.mark.parametrize("name", ["holt", "arima"])
def test_ramp_is_followed_with_float_steps(name: str) -> None:
    # steps that are not exact in binary: the ARIMA regressors are only nearly collinear
    values = [0.1 * i + 0.3 for i in range(40)]
    assert feed(name, values) == pytest.approx(0.1 * 40 + 0.3, rel=0.02)


def test_ewma_lags_a_ramp() -> None:
    values = ramp(30)
    nxt = ramp(31)[-1]
    ewma = feed("ewma", values)
    assert ewma < values[-1] < nxt
    # the lag of a weight-0.5 EWMA on a ramp is slope · (1 − α) / α = one step behind the last
    assert ewma == pytest.approx(values[-1] - 2.5, rel=1e-6)
    assert abs(feed("holt", values) - nxt) < abs(ewma - nxt)


def test_holt_catches_a_ramp_earlier_than_ewma() -> None:
    flat = [10.0] * 10
    rising = [10.0 + 5.0 * i for i in range(1, 6)]
    nxt = 10.0 + 5.0 * 6
    holt, ewma, constant = (feed(n, flat + rising) for n in ("holt", "ewma", "constant"))
    assert ewma < constant < holt <= nxt * 1.05


@pytest.mark.parametrize("name", PREDICTORS)
def test_step_change_is_reached(name: str) -> None:
    values = [5.0] * 20 + [50.0] * 20
    assert feed(name, values) == pytest.approx(50.0, rel=0.05)


def test_step_change_first_interval() -> None:
    values = [5.0] * 20 + [50.0]
    assert feed("constant", values) == 50.0
    assert feed("ewma", values) == pytest.approx(27.5)
    # holt extrapolates the jump's trend: it overshoots the new level
    assert feed("holt", values) > 27.5


@pytest.mark.parametrize("name", PREDICTORS)
def test_falling_series_never_negative(name: str) -> None:
    values = [100.0 - 12.0 * i for i in range(9)] + [0.0, 0.0]
    p = make_predictor(name)
    for v in values:
        p.observe(v)
        assert p.predict() >= 0.0
    assert feed(name, [100.0 - 12.0 * i for i in range(9)]) >= 0.0


def test_holt_and_arima_clamp_at_zero_on_a_steep_fall() -> None:
    values = [100.0, 80.0, 60.0, 40.0, 20.0, 5.0, 1.0]
    assert feed("holt", values) == 0.0
    assert feed("arima", values) == 0.0


def test_arima_recovers_an_ar1_difference() -> None:
    # d_t = 1 + 0.6 · d_{t−1}: an exact AR(1) of the differences
    d, x, values = 8.0, 100.0, [100.0]
    for _ in range(20):
        d = 1.0 + 0.6 * d
        x += d
        values.append(x)
    expected = x + (1.0 + 0.6 * d)
    a = Arima(p=1)
    for v in values:
        a.observe(v)
    assert a.predict() == pytest.approx(expected, rel=1e-9)
    # the drift fallback would be the mean difference: not what the fit finds
    drift = values[-1] + (values[-1] - values[0]) / (len(values) - 1)
    assert abs(drift - expected) > 0.1


def test_arima_recovers_an_ar2_difference_oscillation() -> None:
    # d_t = 2 + 0.5 · d_{t−1} − 0.4 · d_{t−2}: the default p = 2 recovers it exactly
    ds, x, values = [3.0, -1.0], 50.0, [50.0]
    for _ in range(25):
        ds.append(2.0 + 0.5 * ds[-1] - 0.4 * ds[-2])
        x += ds[-1]
        values.append(x)
    expected = x + 2.0 + 0.5 * ds[-1] - 0.4 * ds[-2]
    assert feed("arima", values) == pytest.approx(expected, rel=1e-9)


def test_arima_on_a_noisy_ar1_beats_constant() -> None:
    rng = random.Random(7)
    d, x, values = 0.0, 500.0, [500.0]
    for _ in range(40):
        d = 4.0 + 0.7 * d + rng.gauss(0.0, 0.05)
        x += d
        values.append(x)
    expected = x + 4.0 + 0.7 * d  # the noise-free next value
    got = feed("arima", values)
    assert got == pytest.approx(expected, abs=0.5)
    assert abs(got - expected) < abs(values[-1] - expected) / 10


def test_arima_is_constant_until_p_plus_3_values() -> None:
    a = Arima(p=2)
    for v in [1.0, 2.0, 3.0, 4.0]:
        a.observe(v)
        assert a.predict() == v
    a.observe(5.0)  # p + 3 values: the drift of a ramp
    assert a.predict() == pytest.approx(6.0)


def test_arima_needs_more_rows_than_unknowns() -> None:
    # 6 values: 5 differences, 3 rows for 3 unknowns. The exact fit would say
    # about +0.17; with no residual to judge it by, the drift (mean difference) it is
    values = [0.0, 2.0, 3.0, 7.0, 8.0, 13.0]
    assert feed("arima", values) == pytest.approx(13.0 + 13.0 / 5)


def test_arima_window_forgets() -> None:
    # a long flat history, then a ramp filling the window: only the ramp counts
    a = Arima(window=8)
    for v in [10.0] * 50 + ramp(8, start=20.0, slope=3.0):
        a.observe(v)
    assert a.predict() == pytest.approx(20.0 + 3.0 * 8)


def test_arima_step_is_bounded() -> None:
    # 4 rows for 3 unknowns: the fit says the next difference is about +279;
    # the step is held to twice the largest difference seen (12)
    values = [0.0, 1.0, 9.0, 7.0, 19.0, 12.0, 17.0]
    assert feed("arima", values) == pytest.approx(17.0 + 2 * 12.0)


def test_holt_trend_from_second_value() -> None:
    h = Holt()
    h.observe(10.0)
    assert h.predict() == 10.0
    h.observe(14.0)
    assert h.predict() == pytest.approx(18.0)


def test_solve() -> None:
    a = [[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.0, 1.0]]  # needs a pivot swap
    x = solve(a, [6.0, 3.0, 5.0])
    assert x == pytest.approx([1.0, 2.0, 2.0])
    assert solve([[1.0, 2.0], [2.0, 4.0]], [1.0, 2.0]) is None
    assert a[0] == [0.0, 2.0, 1.0]  # not changed


def test_make_predictor_unknown() -> None:
    with pytest.raises(ValueError, match="constant, ewma, holt, arima"):
        make_predictor("prophet")


@pytest.mark.parametrize("bad", [{"alpha": 0.0}, {"alpha": 1.5}])
def test_bad_parameters(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Holt(**bad)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(PREDICTORS),
    st.lists(st.floats(min_value=0.0, max_value=1e9, allow_nan=False), max_size=60),
)
def test_predictions_finite_and_non_negative(name: str, values: list[float]) -> None:
    p = make_predictor(name)
    assert p.predict() == 0.0
    for v in values:
        p.observe(v)
        out = p.predict()
        assert math.isfinite(out)
        assert out >= 0.0
