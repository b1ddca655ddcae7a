"""rotor's lock-free histogram (api/histogram.py) exposes what
prometheus_client's own Histogram does for the same observations: the same
series, labels, bucket bounds, counts and sums (only `_created`'s clock
reading differs)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from rotor.api.histogram import FastHistogram

BUCKETS = (0.0005, 0.001, 0.01, 0.1, 1, 30)


def _without_created(text: bytes) -> str:
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", text.decode())


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.one_of(st.sampled_from(BUCKETS), st.floats(0, 100, allow_nan=False)),
        ),
        max_size=40,
    )
)
def test_the_exposition_is_prometheus_clients(observations: list[tuple[str, float]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = FastHistogram("x_seconds", "Some latency", ["model"], BUCKETS, ours)
    slow = Histogram("x_seconds", "Some latency", ["model"], buckets=BUCKETS, registry=theirs)
    for model in ("a", "b"):  # both label sets exist from the start, as served models do
        fast.labels(model)
        slow.labels(model)
    for model, value in observations:
        fast.labels(model).observe(value)
        slow.labels(model).observe(value)
    assert _without_created(generate_latest(ours)) == _without_created(generate_latest(theirs))


def test_a_value_on_a_bound_counts_in_that_bound() -> None:
    """`le` is "less than or equal": 0.001 lands in le="0.001"."""
    registry = CollectorRegistry()
    h = FastHistogram("y", "y", ["model"], BUCKETS, registry)
    h.labels("m").observe(0.001)
    text = generate_latest(registry).decode()
    assert 'y_bucket{le="0.0005",model="m"} 0.0' in text
    assert 'y_bucket{le="0.001",model="m"} 1.0' in text
    assert 'y_count{model="m"} 1.0' in text
