"""Session affinity: a conversation's turns go to the worker that served its
last turn, so a multi-turn agent keeps its KV cache on one worker whatever
the routing mode (`x-rotor-session-id`, or the body's `session_id`).

A pin lasts `--session-ttl` seconds after the turn that set it, and holds
only while its worker is live and not overloaded; otherwise the pool's
router decides and the pin moves to the worker it picks. "Overloaded" is
what a worker's lease says: it has requests waiting to be admitted while
another live worker has none (there the turn starts at once; on the pinned
worker it would queue behind others, which costs more than its cache saves).

Pins are kept in the order they were last set, so the expired ones are
always at the front: each pin costs O(1), and at most `capacity` are kept
(the oldest go first).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from rotor.protocol.lease import Lease

DEFAULT_TTL_S = 300.0
CAPACITY = 100_000  # sessions remembered at once, per pool

# What became of a turn that named a session: it went to its pinned worker,
# it had no (live) pin yet, or it moved because its worker was gone or overloaded.
Outcome = Literal["pinned", "new", "moved_gone", "moved_overloaded"]


class Sessions:
    """Which worker served each session's last turn, while the pin is fresh."""

    def __init__(
        self,
        ttl: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        capacity: int = CAPACITY,
    ) -> None:
        self.ttl = ttl
        self.clock = clock
        self.capacity = capacity
        self._pins: dict[str, tuple[str, float]] = {}  # session: (worker, when set), oldest first

    def __len__(self) -> int:
        self._expire()
        return len(self._pins)

    def pinned(self, session: str) -> str | None:
        """The worker of the session's last turn, if that was within the TTL."""
        self._expire()
        pin = self._pins.get(session)
        return pin[0] if pin is not None else None

    def pin(self, session: str, worker: str) -> None:
        """The session's turn went to `worker`: its next turns go there too."""
        self._pins.pop(session, None)
        self._pins[session] = (worker, self.clock())
        if len(self._pins) > self.capacity:
            del self._pins[next(iter(self._pins))]

    def choose(self, session: str, live: list[Lease]) -> tuple[Lease | None, Outcome]:
        """The live worker the session's turn should keep to (None: let the
        router decide), and why."""
        worker = self.pinned(session)
        if worker is None:
            return None, "new"
        lease = next((w for w in live if w.worker_id == worker), None)
        if lease is None:
            return None, "moved_gone"
        if lease.state.waiting > 0 and any(w.state.waiting == 0 for w in live):
            return None, "moved_overloaded"
        return lease, "pinned"

    def _expire(self) -> None:
        oldest = self.clock() - self.ttl
        pins = self._pins
        while pins:
            session, (_, when) = next(iter(pins.items()))
            if when > oldest:
                return
            del pins[session]
