"""Open-loop arrivals: gamma gaps of mean 1/rate and shape burstiness, driven
by an injected random source (no wall time)."""

from __future__ import annotations

import math
import random
import statistics
from itertools import islice

import pytest

from rotor.bench.arrivals import gaps, schedule, seeded


class Recorder:
    """A random source that answers a fixed gap and records what was asked."""

    def __init__(self, gap: float) -> None:
        self.gap = gap
        self.calls: list[tuple[float, float]] = []

    def gammavariate(self, alpha: float, beta: float) -> float:
        self.calls.append((alpha, beta))
        return self.gap


def test_gap_distribution_parameters() -> None:
    src = Recorder(0.25)
    assert list(islice(gaps(4.0, 0.5, src), 3)) == [0.25, 0.25, 0.25]
    # shape = burstiness, scale = 1 / (rate · burstiness): mean shape·scale = 1/rate
    assert src.calls == [(0.5, 0.5)] * 3


def test_schedule_is_cumulative_from_zero_and_stops() -> None:
    assert list(schedule(10.0, 1.0, Recorder(0.1), count=4)) == pytest.approx([0, 0.1, 0.2, 0.3])
    assert list(schedule(10.0, 1.0, Recorder(0.3), until=1.0)) == pytest.approx([0, 0.3, 0.6, 0.9])
    src = Recorder(1.0)
    assert list(schedule(math.inf, 1.0, src, count=5)) == [0.0] * 5
    assert src.calls == []  # an unbounded rate draws nothing


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_seeded_gaps_have_the_asked_mean_and_spread(burstiness: float) -> None:
    rate = 20.0
    sample = list(islice(gaps(rate, burstiness, random.Random(7)), 20000))
    mean = statistics.fmean(sample)
    cv = statistics.pstdev(sample) / mean
    assert mean == pytest.approx(1 / rate, rel=0.05)
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.06)  # Poisson: cv 1


def test_same_seed_same_schedule() -> None:
    a = list(schedule(5.0, 0.7, seeded(3), count=50))
    b = list(schedule(5.0, 0.7, seeded(3), count=50))
    c = list(schedule(5.0, 0.7, seeded(4), count=50))
    assert a == b and a != c
    assert all(x <= y for x, y in zip(a, a[1:], strict=False))


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="rate"):
        next(gaps(0.0, 1.0, random.Random()))
    with pytest.raises(ValueError, match="burstiness"):
        next(gaps(1.0, 0.0, random.Random()))
