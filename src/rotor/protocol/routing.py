"""What a router tells the layers above it (the frontend, the API), which
read it without knowing the router: where one request went (`Routed`, filled
by router/pool.Pool), and what a pool counted, as /metrics reads it
(`PoolCounts`, `KVCounts`: router/stats.PoolStats and router/kv.KVStats have
these fields)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from rotor.histogram import Histogram


@dataclass
class Routed:
    """Where one request went, for its response and its request-log record:
    its first route's headers (`x-rotor-worker`, …; the decision's own dict,
    complete once the request has its first output) and each migration, as
    (cause, the worker it moved to), as it happens."""

    headers: dict[str, str]
    migrations: list[tuple[str, str]] = field(default_factory=list)


class PoolCounts(Protocol):
    """What a pool counted since it began (`rotor_router_*`, `rotor_disagg_*`)."""

    @property
    def decisions(self) -> Mapping[str, int]:
        """Requests routed, by worker."""
        ...

    @property
    def migrations(self) -> Mapping[str, int]:
        """Requests moved to another worker, by cause."""
        ...

    @property
    def no_worker(self) -> int:
        """Requests refused: no live worker."""
        ...

    @property
    def overloaded(self) -> int:
        """Requests refused: every live worker was past the overload limits."""
        ...

    @property
    def sessions(self) -> Mapping[str, int]:
        """Turns that named a session, by what became of them."""
        ...

    @property
    def disagg(self) -> Mapping[tuple[str, str], int]:
        """Prefill decisions, by (where, reason)."""
        ...

    @property
    def handover(self) -> Histogram:
        """Seconds from a prefill worker's answer to the decode worker's first token."""
        ...


class KVCounts(Protocol):
    """What a pool's kv router counted: prompt blocks asked and found, per worker."""

    @property
    def prompt_blocks(self) -> Mapping[str, int]: ...

    @property
    def overlap_blocks(self) -> Mapping[str, int]: ...

    @property
    def hits(self) -> Mapping[str, int]: ...

    @property
    def tier_blocks(self) -> Mapping[tuple[str, str], int]:
        """Blocks found, by (worker, where each sat: device, host, disk, predicted)."""
        ...
