"""The next interval's value of one load figure (requests/s, prompt or answer
length) from the intervals before it.

The planner sizes pools for the interval ahead, so it needs a forecast, not
the last reading: a pool sized to what the load was is one interval late on
every ramp. Four predictors, from the cheapest to the most eager:

- `constant`: the last value. No lag model at all; the baseline.
- `ewma`: an exponentially weighted mean. Smooths noise, lags a ramp.
- `holt`: Holt's linear smoothing (level + trend). Follows a ramp, so a
  rising load is caught an interval early.
- `arima`: ARIMA(p,1,0), an AR(p) model of the first differences refit by
  least squares every interval. Follows a ramp and learns how the
  increments themselves move (an accelerating or oscillating load).

All pure Python, no numpy or statsmodels: rotor keeps its core dependencies
small, and these series are a few dozen floats long. Every prediction is
finite and never negative (a load is never negative); before the first
observation it is 0.0.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from typing import Protocol


class Predictor(Protocol):
    def observe(self, value: float) -> None:
        """One value per planner interval, oldest first."""
        ...

    def predict(self) -> float:
        """The next interval's value: finite, >= 0; 0.0 with nothing observed."""
        ...


def _clamp(x: float) -> float:
    return x if x > 0.0 and math.isfinite(x) else 0.0


class Constant:
    """The last value."""

    def __init__(self) -> None:
        self.last: float | None = None

    def observe(self, value: float) -> None:
        self.last = value

    def predict(self) -> float:
        return 0.0 if self.last is None else _clamp(self.last)


class Ewma:
    """mean ← alpha·x + (1 − alpha)·mean, seeded by the first value."""

    def __init__(self, alpha: float = 0.5) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"ewma alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.mean: float | None = None

    def observe(self, value: float) -> None:
        if self.mean is None:
            self.mean = value
        else:
            self.mean = self.alpha * value + (1.0 - self.alpha) * self.mean

    def predict(self) -> float:
        return 0.0 if self.mean is None else _clamp(self.mean)


class Holt:
    """Holt's double exponential smoothing:
        level ← alpha·x + (1 − alpha)·(level + trend)
        trend ← beta·(level − previous level) + (1 − beta)·trend
    one step ahead = level + trend. The first value sets the level, the second
    the trend (their difference), so an exact ramp is followed from the third
    interval on instead of being learned slowly from a zero trend."""

    def __init__(self, alpha: float = 0.5, beta: float = 0.3) -> None:
        if not 0.0 < alpha <= 1.0 or not 0.0 < beta <= 1.0:
            raise ValueError(f"holt alpha and beta must be in (0, 1], got {alpha}, {beta}")
        self.alpha = alpha
        self.beta = beta
        self.level: float | None = None
        self.trend = 0.0
        self.seen = 0

    def observe(self, value: float) -> None:
        self.seen += 1
        if self.level is None:
            self.level = value
        elif self.seen == 2:
            self.trend = value - self.level
            self.level = value
        else:
            prev = self.level
            self.level = self.alpha * value + (1.0 - self.alpha) * (prev + self.trend)
            self.trend = self.beta * (self.level - prev) + (1.0 - self.beta) * self.trend

    def predict(self) -> float:
        return 0.0 if self.level is None else _clamp(self.level + self.trend)


class Arima:
    """ARIMA(p,1,0): over the last `window` values, the first differences
    d_t = x_t − x_{t−1} are fit as d_t = c + φ_1·d_{t−1} + … + φ_p·d_{t−p} by
    ordinary least squares (the normal equations, solved by Gaussian
    elimination); the forecast is x_last + ĉ + Σ φ̂_i·d_{last+1−i}.

    Until it holds p + 3 values it predicts the last value (too little to
    say anything about the increments). When the fit is singular, or has no
    more rows than unknowns (an exact fit of a few points extrapolates
    wildly), the forecast is the last value plus the mean difference (the
    drift): on an exact ramp the differences are constant, the regressors
    collinear, and the drift is the right answer. The predicted difference is
    kept within twice the largest difference in the window, so an unlucky
    fit cannot send the planner a load it has never seen the like of."""

    def __init__(self, p: int = 2, window: int = 32) -> None:
        if p < 1:
            raise ValueError(f"arima p must be >= 1, got {p}")
        if window < p + 3:
            raise ValueError(f"arima window must be >= p + 3 = {p + 3}, got {window}")
        self.p = p
        self.values: deque[float] = deque(maxlen=window)

    def observe(self, value: float) -> None:
        self.values.append(value)

    def predict(self) -> float:
        if not self.values:
            return 0.0
        last = self.values[-1]
        if len(self.values) < self.p + 3:
            return _clamp(last)
        xs = list(self.values)
        diffs = [b - a for a, b in itertools.pairwise(xs)]
        scale = max(abs(d) for d in diffs)
        if scale == 0.0 or not math.isfinite(scale):
            return _clamp(last)
        # Work in units of the largest difference: no overflow, and the
        # singularity test below is relative.
        ds = [d / scale for d in diffs]
        step = self._fit_step(ds)
        if step is None:
            step = sum(ds) / len(ds)
        step = max(-2.0, min(2.0, step))
        return _clamp(last + step * scale)

    def _fit_step(self, ds: list[float]) -> float | None:
        """The AR(p) one-step forecast of the next difference; None when the
        fit is underdetermined or singular."""
        p = self.p
        rows = [[1.0, *(ds[t - i] for i in range(1, p + 1))] for t in range(p, len(ds))]
        targets = ds[p:]
        k = p + 1
        if len(rows) <= k:
            return None
        gram = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
        rhs = [sum(r[i] * y for r, y in zip(rows, targets, strict=True)) for i in range(k)]
        coef = solve(gram, rhs)
        if coef is None:
            return None
        nxt = [1.0, *(ds[len(ds) - i] for i in range(1, p + 1))]
        step = sum(c * x for c, x in zip(coef, nxt, strict=True))
        return step if math.isfinite(step) else None


def solve(a: list[list[float]], b: list[float], rtol: float = 1e-9) -> list[float] | None:
    """x with a·x = b, by Gaussian elimination with partial pivoting; None
    when a pivot is below `rtol` times a's largest entry (singular, or so
    near it that the answer would be noise). `a` and `b` are not changed."""
    n = len(b)
    m = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]
    tol = rtol * max((abs(v) for row in a for v in row), default=0.0)
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) <= tol:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            if f:
                for j in range(col, n + 1):
                    m[r][j] -= f * m[col][j]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        acc = m[r][n] - sum(m[r][j] * x[j] for j in range(r + 1, n))
        x[r] = acc / m[r][r]
    return x


PREDICTORS = ("constant", "ewma", "holt", "arima")


def make_predictor(name: str) -> Predictor:
    """A fresh predictor with its default parameters, by its `--predictor` name."""
    if name == "constant":
        return Constant()
    if name == "ewma":
        return Ewma()
    if name == "holt":
        return Holt()
    if name == "arima":
        return Arima()
    raise ValueError(f"unknown predictor {name!r}; valid: {', '.join(PREDICTORS)}")
