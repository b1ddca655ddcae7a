"""What a pool counts for /metrics (`rotor_router_*`, `rotor_disagg_*`):
plain counters, read at scrape time; nothing here is on a token's path."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from rotor.histogram import Histogram

# Seconds from a prefill worker's answer to the decode worker's first token
# (the KV fetch, the rest of the prompt, one step): the buckets of its histogram.
HANDOVER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class PoolStats:
    decisions: collections.Counter[str] = field(default_factory=collections.Counter)
    migrations: collections.Counter[str] = field(default_factory=collections.Counter)
    no_worker: int = 0
    overloaded: int = 0  # requests refused: every live worker past the overload limits
    # session affinity: what became of each turn that named a session (router/sessions.py)
    sessions: collections.Counter[str] = field(default_factory=collections.Counter)
    # disaggregation: (where, reason) of every prefill decision, and handovers
    disagg: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    handover: Histogram = field(default_factory=lambda: Histogram(HANDOVER_BUCKETS))
