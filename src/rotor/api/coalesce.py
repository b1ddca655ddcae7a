"""Fewer, larger socket writes for a stream whose events come faster than they
are written.

A streamed response writes once per event; the write (a syscall) is the
largest single cost of a streamed token. When the source already holds more
events — an engine that produced a burst, a remote engine whose outputs
arrived in one read, a client that fell behind — those can go out in one
write with no added latency: the bytes are the same, only the number of
writes changes. `Coalescer.pull` returns everything the source can give
*without waiting*, joined.

"Without waiting" is decided by stepping the source's next `__anext__`
coroutine once by hand: if it finishes, its event was ready; if it suspends,
the future it suspended on is kept and handed to the event loop on the next
pull (`finish_step`), exactly as `await` would have done. No task, no queue and
no timer per event.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator, Coroutine, Generator
from typing import Any

# A joined write stops growing here, so one huge burst still streams in pieces.
MAX_PARTS = 64
MAX_BYTES = 64 * 1024
# The first write of a stream stops sooner: the events behind it are formatted
# before it is sent, and a whole burst (an engine that answered at once) would
# hold the first token back by tens of events. Enough for every API's opening
# events and the first token.
FIRST_PARTS = 8


@types.coroutine
def finish_step(coro: Coroutine[Any, Any, bytes], pending: Any) -> Generator[Any, Any, bytes]:
    """Finish a coroutine that already suspended once (on `pending`): hand that
    future to the running task, then let `yield from` (in C) run the rest. A
    cancellation that arrives while parked is thrown into the coroutine."""
    try:
        yield pending
    except BaseException as exc:
        try:
            pending = coro.throw(exc)
        except StopIteration as stop:
            return stop.value
        return (yield from _forward(coro, pending))
    return (yield from coro)  # type: ignore[misc]


def _forward(coro: Coroutine[Any, Any, bytes], pending: Any) -> Generator[Any, Any, bytes]:
    """The rest of a coroutine that is suspended on `pending` (the slow path:
    it is unwinding a cancellation)."""
    while True:
        try:
            sent = yield pending
        except BaseException as exc:
            try:
                pending = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                pending = coro.send(sent)
            except StopIteration as stop:
                return stop.value


class Coalescer:
    """Reads an async iterator of byte chunks, a batch at a time: `pull`
    waits for the next chunk, then adds every chunk that is ready now.

    An exception from the source is raised by the pull after the chunks
    before it were returned, so nothing it yielded is lost."""

    __slots__ = ("_anext", "_parked", "_error", "_done")

    def __init__(self, source: AsyncIterator[bytes]) -> None:
        self._anext = source.__aiter__().__anext__
        # a step that suspended (its coroutine, and the future it waits on), to finish next
        self._parked: tuple[Coroutine[Any, Any, bytes], Any] | None = None
        self._error: BaseException | None = None  # raised by the next pull
        self._done = False

    @property
    def done(self) -> bool:
        """The source has ended: the last pull returned its last chunk."""
        return self._done and self._error is None

    async def pull(self, max_parts: int = MAX_PARTS) -> bytes | None:
        """The next chunk and every chunk ready behind it (up to `max_parts`),
        joined; None at the end."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._done:
            return None
        try:
            if self._parked is not None:
                (coro, pending), self._parked = self._parked, None
                first = await finish_step(coro, pending)
            else:
                first = await self._anext()
        except StopAsyncIteration:
            self._done = True
            return None
        parts: list[bytes] | None = None
        size = len(first)
        while size < MAX_BYTES and (1 if parts is None else len(parts)) < max_parts:
            coro = self._anext()
            try:
                pending = coro.send(None)  # type: ignore[attr-defined]
            except StopIteration as stop:  # ready now: it joins this write
                chunk = stop.value
                if parts is None:
                    parts = [first]
                parts.append(chunk)
                size += len(chunk)
                continue
            except StopAsyncIteration:
                self._done = True
                break
            except Exception as exc:  # the source broke: this batch first, then the error
                self._error = exc
                break
            self._parked = (coro, pending)  # type: ignore[assignment]
            break
        return first if parts is None else b"".join(parts)

    async def aclose(self) -> None:
        """End a parked step before the source is closed (a source suspended
        inside a step cannot be closed): the future it waits on is cancelled,
        so it unwinds as a cancelled await would."""
        parked, self._parked = self._parked, None
        if parked is None:
            return
        coro, pending = parked
        if pending is not None:
            pending.cancel()
        try:
            await finish_step(coro, pending)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # our own cancellation, not the one we caused
        except (StopAsyncIteration, Exception):
            pass  # the source ended or broke while unwinding: it is closed either way
