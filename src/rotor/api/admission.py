"""Admission control: at most `limit` requests waiting for their first token.

A request is queued from the moment it is accepted until its first engine
event arrives (preparing, waiting in the engine's queue, prefill). Beyond the
limit a request is refused at once — a 503 with Retry-After, before any byte
of a stream — instead of joining a queue whose wait no client would accept.
Running requests do not count: the engine bounds those itself.

One `Admission` guards one worker: the in-process engine today, each remote
worker in the distributed router.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

# Four full batches of the mocker's default max_num_seqs (256): at believable
# engine speeds a request further back than this waits longer for its first
# token than a client would take to retry elsewhere.
DEFAULT_MAX_QUEUED = 1024
RETRY_AFTER_S = 1


class Overloaded(Exception):
    """The queue is full; str(e) says so, `retry_after` is in seconds."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the server is at its limit of {limit} queued requests; retry after {RETRY_AFTER_S} s"
        )
        self.limit = limit
        self.retry_after = RETRY_AFTER_S


class Admission:
    """A counter with a ceiling; `depth` is what /metrics reports."""

    __slots__ = ("limit", "depth", "refused")

    def __init__(self, limit: int = DEFAULT_MAX_QUEUED) -> None:
        if limit < 1:
            raise ValueError(f"the queue limit must be at least 1, got {limit}")
        self.limit = limit
        self.depth = 0
        self.refused = 0

    @contextmanager
    def queued(self) -> Iterator[None]:
        """Hold one place in the queue for the block (until the first event);
        Overloaded when none is free."""
        if self.depth >= self.limit:
            self.refused += 1
            raise Overloaded(self.limit)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
