"""What a router tells the layers above it (the frontend, the API), which
read it without knowing the router: where one request went (`Routed`, filled
by router/pool.Pool)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Routed:
    """Where one request went, for its response and its request-log record:
    its first route's headers (`x-rotor-worker`, …; the decision's own dict,
    complete once the request has its first output) and each migration, as
    (cause, the worker it moved to), as it happens."""

    headers: dict[str, str]
    migrations: list[tuple[str, str]] = field(default_factory=list)
