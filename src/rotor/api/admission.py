"""Admission control: at most `limit` requests waiting for their first token,
and behind them at most `waiting_limit` more waiting in the frontend's own
line, best first by (priority, arrival).

A request holds a place from the moment it is admitted until its first engine
event arrives (preparing, waiting in the engine's queue, prefill) or it fails
or leaves. When every place is taken, a new request waits in the line
(`--max-waiting-requests`; 0, the default, refuses it at once instead); each
place that frees goes straight to the best waiting request: the lowest
`priority` (vLLM's meaning), then the earliest arrival. When the line is full
too, the worse of the newcomer and the worst waiting request is refused (a
tie refuses the newcomer): under overload a high-priority request displaces a
low-priority one, never the reverse. A refusal is a 503 with Retry-After,
before any byte of a stream. Running requests do not count: the engine bounds
those itself. A request that leaves the line (its client went away: its task
is cancelled) is out of it at once.

The line is a list kept sorted worst first, so the best waiting request is
popped from its end and the worst, the one a better newcomer displaces, is at
its start: a heap would give only one of the two cheaply. With nobody waiting
(the usual case) a request costs a counter check.

One `Admission` guards one HTTP process (`create_app` makes it): every model
that process serves, whether its engine is in-process (`rotor run`) or a pool
of remote workers (`rotor frontend`); with `--http-workers N` each of the N
processes has its own.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left, insort
from itertools import count
from types import TracebackType

# Four full batches of the mocker's default max_num_seqs (256): at believable
# engine speeds a request further back than this waits longer for its first
# token than a client would take to retry elsewhere.
DEFAULT_MAX_QUEUED = 1024
DEFAULT_MAX_WAITING = 0  # no line: past the places a request is refused at once
RETRY_AFTER_S = 1


class Overloaded(Exception):
    """The queue (and the line behind it) is full; str(e) says so,
    `retry_after` is in seconds."""

    def __init__(self, limit: int, waiting_limit: int = 0) -> None:
        line = f" and {waiting_limit} waiting" if waiting_limit else ""
        super().__init__(
            f"the server is at its limit of {limit} queued requests{line}; "
            f"retry after {RETRY_AFTER_S} s"
        )
        self.limit = limit
        self.retry_after = RETRY_AFTER_S


# One waiting request: (-priority, -arrival, its place). Sorted ascending, the
# worst (highest priority number, then latest arrival) is first and the best
# last; arrivals are unique, so the future is never compared.
_Waiter = tuple[int, int, "asyncio.Future[None]"]


class Admission:
    """Places with a ceiling and a line behind them; `depth` (places taken)
    and `waiting` are what /metrics reports."""

    __slots__ = ("limit", "waiting_limit", "depth", "refused", "_line", "_arrivals")

    def __init__(
        self, limit: int = DEFAULT_MAX_QUEUED, waiting_limit: int = DEFAULT_MAX_WAITING
    ) -> None:
        if limit < 1:
            raise ValueError(f"the queue limit must be at least 1, got {limit}")
        if waiting_limit < 0:
            raise ValueError(f"the waiting limit must be 0 or more, got {waiting_limit}")
        self.limit = limit
        self.waiting_limit = waiting_limit
        self.depth = 0  # places taken; never above `limit`, and at it while anyone waits
        self.refused = 0
        self._line: list[_Waiter] = []
        self._arrivals = count()

    @property
    def waiting(self) -> int:
        """Requests in the line, waiting for a place."""
        return len(self._line)

    def queued(self, priority: int = 0) -> Place:
        """`async with admission.queued(priority):` holds one place for the
        block (until the first event), waiting in line for it when none is
        free; Overloaded when it is refused, at once or displaced from the
        line later."""
        return Place(self, priority)

    def leave(self) -> None:
        """Give a place back: to the best waiting request, or free."""
        line = self._line
        while line:
            place = line.pop()[2]
            if not place.done():  # (a cancelled one is on its way out)
                place.set_result(None)  # the place passes to it: depth stays
                return
        self.depth -= 1

    async def wait_in_line(self, priority: int) -> None:
        """A place once every one is taken: wait for it in line (Overloaded
        when refused). Give it back with `leave`."""
        line = self._line
        if len(line) >= self.waiting_limit:
            # the worse of the newcomer and the worst waiting is refused
            if not line or -line[0][0] <= priority:
                self.refused += 1
                raise Overloaded(self.limit, self.waiting_limit)
            worst = line.pop(0)[2]
            if not worst.done():
                self.refused += 1
                worst.set_exception(Overloaded(self.limit, self.waiting_limit))
        place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (-priority, -next(self._arrivals), place)
        insort(line, waiter)
        try:
            await place
        except BaseException:
            if place.done() and not place.cancelled() and place.exception() is None:
                self.leave()  # handed a place just as it left: the next one takes it
            else:
                self._drop(waiter)
            raise

    def _drop(self, waiter: _Waiter) -> None:
        """`waiter` out of the line, if it is still there."""
        line = self._line
        i = bisect_left(line, waiter)
        if i < len(line) and line[i][2] is waiter[2]:
            del line[i]


class Place:
    """One request's place in the admission queue, held for an `async with`."""

    __slots__ = ("_admission", "_priority")

    def __init__(self, admission: Admission, priority: int) -> None:
        self._admission = admission
        self._priority = priority

    async def __aenter__(self) -> None:
        a = self._admission
        if a.depth < a.limit:  # the fast path: nobody waits while a place is free
            a.depth += 1
        else:
            await a.wait_in_line(self._priority)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._admission.leave()
