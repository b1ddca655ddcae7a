"""Ending open streams at shutdown: when the SIGTERM grace runs out, every
stream still open ends the way its API ends a failed stream (an error event
saying the server is shutting down, then `[DONE]` or the API's own end), not
cut off mid-event when the server stops."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("rotor.api")

SHUTTING_DOWN = "the server is shutting down; retry the request"


class OpenStreams:
    """The streams an app is sending, and the signal that ends them all."""

    def __init__(self) -> None:
        self.count = 0
        self._stopping: asyncio.Event | None = None

    @property
    def stopping(self) -> asyncio.Event:
        if self._stopping is None:  # made on the serving loop
            self._stopping = asyncio.Event()
        return self._stopping

    def end_all(self, grace_s: float) -> int:
        """Tell every open stream to end now; one log line says how many."""
        n = self.count
        self.stopping.set()
        if n:
            log.warning(
                "shutdown: the %g s grace is over; ending %d open stream(s) with an error event",
                grace_s,
                n,
            )
        return n
