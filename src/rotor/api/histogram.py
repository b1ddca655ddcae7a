"""A Prometheus histogram whose `observe` costs a bisect and two additions.

prometheus_client's Histogram takes a lock for the sum and another for the
bucket on every observation (about a microsecond); rotor observes the gap
before every streamed event, so that was a cost of every token. These
children are written only from the event loop's thread (the responses of
one process), so they need no lock; a scrape copies the counts. The
exposition is prometheus_client's own: the same `_bucket`, `_count`, `_sum`
and `_created` series a `Histogram` with these labels would show.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.samples import Sample

from rotor.histogram import Histogram


class HistogramChild(Histogram):
    """One label set's buckets (rotor.histogram.Histogram), and when it began."""

    __slots__ = ("created",)

    def __init__(self, bounds: tuple[float, ...]) -> None:
        super().__init__(bounds)
        self.created = time.time()


class FastHistogram:
    """A labelled histogram registered as a collector of its own."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        self._children: dict[tuple[str, ...], HistogramChild] = {}
        registry.register(self)

    def labels(self, *values: str) -> HistogramChild:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = HistogramChild(self.bounds)
        return child

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            family.add_metric(list(values), child.cumulative(), sum_value=child.total)
            family.samples.append(
                Sample(
                    self.name + "_created",
                    dict(zip(self.labelnames, values, strict=True)),
                    child.created,
                )
            )
        yield family
