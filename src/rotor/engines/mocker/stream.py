"""A mocker request's outputs on their way to its reader, pulled or pushed.

The step loop puts each choice's outputs in the request's `Outbox`. A reader
that pulls (`MockerStream.__anext__`) waits on the outbox and takes what
piled up at once, merged per choice, so a reader that fell behind reads one
output per choice however many steps it missed. A reader that has switched
to push (`MockerStream.deliver`, the `Pushed` contract) is handed the same
outputs by the engine itself at its next delivery point (when it gives the
event loop back after a slice of steps, or after a step at real pace):
no task is woken for it, and no generator stands between the engine and
the reader's own code.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rotor.engines.mocker.sampler import LogprobMaker
from rotor.engines.mocker.sequence import Sequence
from rotor.protocol.engine import Delivery, EngineOutput, EngineRequest, absorb, delivery_broke

if TYPE_CHECKING:
    from rotor.engines.mocker.engine import MockerEngine


# Tokens a request's consumer may leave unread before its sequences stop
# being computed (backpressure: a slow reader holds a bounded backlog).
OUTBOX_WINDOW = 256


@dataclass(frozen=True, slots=True)
class Closed:
    """Queue marker: this choice ends with no further output (aborted, or `eof`)."""

    index: int


class Outbox:
    """A request's outputs, taken in batches: when the consumer falls behind, what
    piled up is handed over at once (and merged per choice), so a loaded server
    writes one chunk per batch of tokens instead of one per token. `tokens`
    unread past OUTBOX_WINDOW make the engine hold the request.

    Pulled, per token it costs an append and, when the reader waits, one
    future made on the loop it was given (no asyncio.Event: its wait looks
    the loop up, a getpid() each time). Pushed (`push_to`), the outbox joins
    the engine's list of those due at its next delivery point instead."""

    __slots__ = ("_items", "_waiter", "_loop", "tokens", "stream", "_due", "_listed")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._items: list[EngineOutput | Closed] = []
        self._waiter: asyncio.Future[None] | None = None
        self._loop = loop
        self.tokens = 0
        self.stream: MockerStream | None = None  # pushed: the stream that delivers
        self._due: list[Outbox] = []
        self._listed = False  # on the due list already

    def push_to(self, stream: MockerStream | None, due: list[Outbox]) -> None:
        """From now on, `stream` takes this outbox's items at the engine's
        delivery points (the outbox lists itself in `due` when it has some)."""
        self.stream = stream
        self._due = due
        if stream is not None and self._items and not self._listed:
            self._listed = True
            due.append(self)

    def put_nowait(self, item: EngineOutput | Closed) -> None:
        self._items.append(item)
        if type(item) is EngineOutput:
            self.tokens += len(item.token_ids)
        if self.stream is not None:
            if not self._listed:
                self._listed = True
                self._due.append(self)
            return
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def take(self) -> list[EngineOutput | Closed]:
        """Everything in the outbox now."""
        items, self._items = self._items, []
        self.tokens = 0
        self._listed = False
        return items

    async def get_all(self) -> list[EngineOutput | Closed]:
        while not self._items:
            waiter = self._waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None
        return self.take()


def merge(items: list[EngineOutput | Closed]) -> list[EngineOutput | Closed]:
    """Each choice's outputs become one output carrying all their tokens (and its
    finish, if one came), in the place of the choice's first output; choices may
    interleave. A choice's `Closed` stays after its output."""
    if len(items) == 1:  # the reader kept up: nothing to merge
        return items
    merged: list[EngineOutput | Closed] = []
    pending: dict[int, EngineOutput] = {}  # per choice: the output still taking tokens
    for item in items:
        if isinstance(item, Closed):
            pending.pop(item.index, None)
            merged.append(item)
            continue
        into = pending.get(item.index)
        if into is None:
            merged.append(item)
            into = item
        else:
            absorb(into, item)
        if into.finish is None:
            pending[item.index] = into
        else:
            pending.pop(item.index, None)
    return merged


@dataclass(slots=True)
class RequestState:
    """A running request as the engine keeps it."""

    seqs: list[Sequence]
    logprobs: list[LogprobMaker | None]
    queue: Outbox
    aborted: set[int] = field(default_factory=set)
    prefill_only: bool = False  # one token, then the prompt's blocks pinned for a decode worker

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the prefix cache held when the request was first admitted:
        its first admitted choice's count (choices are admitted in index order)."""
        return next((s.cached_tokens for s in self.seqs if s.cached_tokens is not None), 0)


class MockerStream:
    """One request's outputs (`MockerEngine.generate`): admitted on the first
    read, then read until every choice has ended, or pushed (`deliver`).
    Closing it early (or `stop`) aborts whatever is still running."""

    __slots__ = (
        "_engine",
        "_request",
        "_req",
        "_using",
        "_ready",
        "_done",
        "_over",
        "_closed",
        "_delivery",
    )

    def __init__(self, engine: MockerEngine, request: EngineRequest) -> None:
        self._engine = engine
        self._request = request
        self._req: RequestState | None = None
        self._using: Any = None  # the adapter's context while it runs
        self._ready: collections.deque[EngineOutput] = collections.deque()  # taken, not read
        self._done: set[int] = set()  # choices that ended
        self._over = False  # every choice ended
        self._closed = False
        self._delivery: Delivery | None = None

    # -- pulled ----------------------------------------------------------------------

    def __aiter__(self) -> MockerStream:
        return self

    async def __anext__(self) -> EngineOutput:
        ready = self._ready
        try:
            req = self._req
            if req is None:
                if self._closed:
                    raise StopAsyncIteration
                req = await self._open()
            while True:
                while ready:
                    out = ready.popleft()
                    if not req.aborted or out.index not in req.aborted:  # aborted since taken
                        return out
                if self._over:
                    raise StopAsyncIteration
                items = await req.queue.get_all()
                self._engine.resume_request(self._request.request_id)  # read again: compute again
                ready.extend(self._take(items))
        except BaseException:
            # the end, or the reader cancelled while it waited: as a generator's `finally`
            self._close()
            raise

    async def aclose(self) -> None:
        self._close()

    def __del__(self) -> None:
        """Dropped unclosed (a reader that broke off): its work stops, as an
        async generator's would when collected: in a turn of its own, since
        the collector may run in the middle of an engine step."""
        if self._closed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop runs: nothing to step into
            self._close()
            return
        loop.call_soon(self._close)

    # -- pushed (rotor.protocol.engine.Pushed) -----------------------------------------

    @property
    def pushable(self) -> bool:
        """Admitted (read once) and not over."""
        return self._req is not None and not self._closed

    def deliver(self, delivery: Delivery) -> None:
        """Push from now on: what was taken but not read, and what the outbox
        holds, goes to `delivery` now; the rest at the engine's delivery points."""
        req = self._req
        if req is None or self._closed:
            raise RuntimeError("deliver() before the first output was read, or after the end")
        self._delivery = delivery
        items: list[Any] = [*self._ready, *req.queue.take()]
        self._ready.clear()
        req.queue.push_to(self, self._engine.due)
        if items or self._over:
            self.push(items)

    def resume(self) -> None:
        if not self._closed:
            self._engine.resume_request(self._request.request_id)

    def stop(self) -> None:
        self._delivery = None
        self._close()

    def push(self, items: list[Any]) -> None:
        """Outbox items (and outputs taken but not read) to the delivery, and
        its end once every choice has ended. A delivery that raises (a bug)
        stops the request and is told so (`delivery_broke`)."""
        delivery = self._delivery
        if delivery is None:
            return
        outputs = self._take(items) if items else []
        ending = False
        try:
            keep = delivery.outputs(outputs) if outputs else True
            if self._delivery is not None and not self._over:
                rid = self._request.request_id
                if keep:  # taken: what the outbox window held may go on
                    self._engine.resume_request(rid)
                else:
                    self._engine.hold_request(rid)
            if self._over and self._delivery is not None:
                self._delivery = None
                self._close()
                ending = True
                delivery.ended(None)
        except Exception as e:
            self.stop()
            delivery_broke(delivery, e, ending)

    # -- both ---------------------------------------------------------------------------

    async def _open(self) -> RequestState:
        """Admission (the engine's): under the request's adapter, which stays
        in use until the stream is closed."""
        using = self._engine.adapter_in_use(self._request.lora)
        using.__enter__()
        try:
            req = self._req = await self._engine.admit(self._request)
        except BaseException:
            using.__exit__(None, None, None)
            self._closed = True
            raise
        self._using = using
        return req

    def _take(self, items: list[Any]) -> list[EngineOutput]:
        """The outputs among outbox items, merged per choice, without aborted
        choices'; counts the choices that ended."""
        req = self._req
        assert req is not None
        done, aborted = self._done, req.aborted
        outputs: list[EngineOutput] = []
        for item in merge(items) if len(items) > 1 else items:
            if type(item) is Closed:
                done.add(item.index)
                continue
            if aborted and item.index in aborted:
                continue
            if item.finish is not None:
                done.add(item.index)
            outputs.append(item)
        if len(done) >= self._request.n:
            self._over = True
        return outputs

    def _close(self) -> None:
        """Once: abort what still runs, and let the engine forget the request."""
        if self._closed:
            return
        self._closed = True
        req = self._req
        if req is not None:
            req.queue.push_to(None, [])
            self._engine.forget(self._request.request_id, abort=not self._over)
        if self._using is not None:
            using, self._using = self._using, None
            using.__exit__(None, None, None)
