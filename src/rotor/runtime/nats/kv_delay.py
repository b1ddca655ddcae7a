"""`rotor worker --kv-events-delay-ms N` (`ROTOR_KV_EVENTS_DELAY_MS`): a test
switch that holds a worker's KV events back N ms before they are published,
so the gap between a request routed to a worker and its KV events reaching
the frontends — what a loaded machine or a far network makes — can be
reproduced on purpose (docs/scale-out.md, docs/benchmarks.md).

Each step's events (those the engine emits in one turn of the event loop)
wait together and go on in order, on the loop's own clock: a step's events
are due N ms after the step, and the steps leave one after another.
A snapshot is never delayed: the events it already covers arrive after it
and are stale to the frontends, as with any snapshot taken while events
are in flight.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from rotor.protocol.kv import KVEvent


class DelayedKVEvents:
    def __init__(self, delay_s: float, publish: Callable[[KVEvent], None]) -> None:
        """`publish(event)` gets each event `delay_s` seconds after the engine gave it."""
        if not delay_s > 0:
            raise ValueError(f"the delay must be > 0 seconds, got {delay_s}")
        self.delay_s = delay_s
        self._publish = publish
        # the steps held back, oldest first: (due on the loop's clock, their events)
        self._steps: collections.deque[tuple[float, list[KVEvent]]] = collections.deque()
        self._open: list[KVEvent] | None = None  # this turn's step, while it is open
        self._timers: set[asyncio.TimerHandle] = set()

    def __len__(self) -> int:
        """Events held back now."""
        return sum(len(events) for _, events in self._steps)

    def add(self, event: KVEvent) -> None:
        """One of the engine's events, in order."""
        if self._open is None:
            loop = asyncio.get_running_loop()
            due = loop.time() + self.delay_s
            self._open = []
            self._steps.append((due, self._open))
            loop.call_soon(self._close_step)
            self._timers.add(loop.call_at(due, self._release, due))
        self._open.append(event)

    def close(self) -> None:
        """Nothing more goes out: what is held back is dropped."""
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        self._steps.clear()
        self._open = None

    def _close_step(self) -> None:
        self._open = None

    def _release(self, due: float) -> None:
        """The step due at `due`, after any before it, oldest first (by the
        step's own due time: a timer may fire a hair early)."""
        self._timers = {t for t in self._timers if t.when() > due}
        steps = self._steps
        while steps and steps[0][0] <= due:
            _, events = steps.popleft()
            if events is self._open:
                self._open = None
            for event in events:
                self._publish(event)
