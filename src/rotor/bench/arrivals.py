"""Open-loop arrival schedules: when each request starts, not when the last ends.

Gaps between arrivals are gamma distributed with shape `burstiness` and mean
1/rate: burstiness 1 is a Poisson process, below 1 burstier, above 1 steadier
(the coefficient of variation is 1/sqrt(burstiness)), as in `vllm bench serve`.
The random source is passed in, so tests drive it without wall time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Protocol


class GammaSource(Protocol):
    def gammavariate(self, alpha: float, beta: float) -> float: ...


def gaps(rate: float, burstiness: float, rng: GammaSource) -> Iterator[float]:
    """Seconds between consecutive arrivals, without end; rate inf → all at once."""
    if not rate > 0:
        raise ValueError(f"request rate must be positive, got {rate}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be positive, got {burstiness}")
    if math.isinf(rate):
        while True:
            yield 0.0
    scale = 1.0 / (rate * burstiness)
    while True:
        yield rng.gammavariate(burstiness, scale)


def schedule(
    rate: float,
    burstiness: float,
    rng: GammaSource,
    count: int | None = None,
    until: float | None = None,
) -> Iterator[float]:
    """Arrival offsets from the start (the first at 0): `count` of them, or
    all before `until` seconds, or without end."""
    t = 0.0
    source = gaps(rate, burstiness, rng)
    i = 0
    while (count is None or i < count) and (until is None or t < until):
        yield t
        i += 1
        t += next(source)


def seeded(seed: int) -> random.Random:
    """The arrival stream's own generator, apart from the workload's."""
    return random.Random(f"arrivals-{seed}")
