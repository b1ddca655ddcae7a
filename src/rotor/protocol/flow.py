"""The per-token path's vocabulary: a source hands its items to the sink that subscribed.

Every stage a token crosses between an engine and a client's socket is a
`Source` for the stage above it, and all but the engine are a `Sink` of the
stage below: the mocker's stream, a transport's reading and a pool's stream
are sources of engine outputs; a choice's run is a sink of those and a source
of events; a streamed response's shaping is a sink of events and a source of
bytes; the SSE response is the sink of those bytes.

A source hands each item over in its own turn of the event loop (`put`): no
task is woken and no generator crossed per item. Two back-channels run down
the same chain: a sink that cannot take more returns False, and the source
holds its work until `resume()`; a sink that leaves calls `stop()`, and the
source's work ends at once.

`Backlog` is the one buffer where items wait for their reader. Two adapters
join the path to code that pulls: `Pulled` reads a source as an async
iterator (and hands the rest over to a sink when asked: the switch), and
`Pump` makes a source of an async iterator (the engines that are
generators: echo, vLLM).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Callable
from typing import Generic, Protocol, TypeVar

log = logging.getLogger("rotor.flow")

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


class Sink(Protocol[T_contra]):
    """Where a source's items go, each as it is made."""

    def put(self, item: T_contra) -> bool:
        """Take `item` (always). False: take no more for now; the source holds
        its work until `Source.resume()` (what it puts meanwhile is taken)."""
        ...

    def end(self, error: Exception | None) -> None:
        """The source is over: done (None) or failed (`error`). Once, last."""
        ...


class Source(Protocol[T_co]):
    """What makes items for a sink: an engine's stream, a choice, a response."""

    def subscribe(self, sink: Sink[T_co]) -> None:
        """Hand every item to `sink` from now on. The first call starts the
        work; a later one (the switch) moves the rest to another sink. Items
        ready now may be put in this very call."""
        ...

    def resume(self) -> None:
        """The sink takes items again (after a `put` said False)."""
        ...

    def stop(self) -> None:
        """The sink is gone: the work ends now; nothing more is put, no end."""
        ...


class SinkBroke(Exception):
    """What a source ends its sink with when that sink raised (a bug above
    it): each stage turns it into its own internal failure."""


def broken(sink: Sink[T], error: Exception, ending: bool) -> None:
    """`sink` raised in `put` (or, `ending`, in `end`): the bug is logged and,
    unless it raised in `end` (called once), the sink is told its source
    ended with it, so what waits on the sink ends instead of waiting for
    ever. The source has stopped its own work first."""
    log.error("a stage of a stream failed", exc_info=(type(error), error, error.__traceback__))
    if ending:
        return
    try:
        sink.end(SinkBroke(f"{type(error).__name__}: {error}"))
    except Exception:
        log.exception("and failed again as it was told so")


class Backlog(Generic[T]):
    """Items made for a reader that has not taken them yet: the one buffer of
    the per-token path (a mocker request's outbox, the messages of a request
    a transport brought, what a pulled reader has not read). Whoever puts
    never waits; the first item since the last `take` says so (`put` returns
    True), and the one who put it arranges for the reader to take them all
    at once: at the engine's next delivery point, at the end of the event
    loop's turn, or by waking a reader that waits. (No callback is kept
    here: a backlog holds no reference back to its reader.)"""

    __slots__ = ("items", "listed")

    def __init__(self) -> None:
        self.items: list[T] = []
        self.listed = False  # a put said True and nothing was taken since

    def put(self, item: T) -> bool:
        """Add `item`; True when it is the first since the last `take`."""
        self.items.append(item)
        if self.listed:
            return False
        self.listed = True
        return True

    def take(self) -> list[T]:
        """Everything in the backlog now."""
        items = self.items
        self.items = []
        self.listed = False
        return items


# What a pulled reader may leave unread before its source is held: in the
# units its `weigh` counts (engine outputs: tokens).
PULLED_WINDOW = 256


class _Inbox(Generic[T]):
    """The sink a `Pulled` subscribes: what the source put, and whether it
    ended. The source holds this, never the `Pulled` itself, so a reader
    that drops its `Pulled` unclosed can be noticed (`Pulled.__del__`)."""

    __slots__ = ("backlog", "weight", "window", "weigh", "held", "ended", "error", "waiter")

    def __init__(self, weigh: Callable[[T], int] | None, window: int) -> None:
        self.backlog: Backlog[T] = Backlog()
        self.weight = 0
        self.window = window
        self.weigh = weigh
        self.held = False  # put said False: the source waits for resume()
        self.ended = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None

    def put(self, item: T) -> bool:
        if self.backlog.put(item):
            self._wake()
        weigh = self.weigh
        self.weight += 1 if weigh is None else weigh(item)
        if self.weight >= self.window:
            self.held = True
            return False
        return True

    def end(self, error: Exception | None) -> None:
        self.ended = True
        self.error = error
        self._wake()

    def take(self) -> list[T]:
        self.weight = 0
        return self.backlog.take()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)


class Pulled(Generic[T]):
    """A source read as an async iterator, for the code that pulls (a
    response collected whole, the terminal, a remote prefill read to its
    end, a response's first event), and the switch from pulling to pushing:
    `subscribe` hands the items not read yet to a sink, then the source
    itself.

    Read, the items the source puts wait in its inbox: `merge` joins what
    piled up (engine outputs: one per choice), and past `window` units
    (`weigh`; one per item by default) unread the source is held until the
    reader catches up. A `Pump` (an engine that is a generator) is read as
    its generator is, one item a read, with no task between. Closing it
    early, or being cancelled while waiting, stops the source; dropped
    unclosed, it stops the source in a turn of its own (as a collected
    async generator would)."""

    __slots__ = (
        "_source",
        "_inbox",
        "_ready",
        "_merge",
        "_weigh",
        "_window",
        "_loop",
        "_state",
        "_failure",
    )

    def __init__(
        self,
        source: Source[T],
        merge: Callable[[list[T]], list[T]] | None = None,
        weigh: Callable[[T], int] | None = None,
        window: int = PULLED_WINDOW,
    ) -> None:
        self._source = source
        self._inbox: _Inbox[T] | None = None
        self._ready: collections.deque[T] = collections.deque()  # taken, not read
        self._merge = merge
        self._weigh = weigh
        self._window = window
        self._loop: asyncio.AbstractEventLoop | None = None
        # new: never read; reading: subscribed, its inbox read; direct: a
        # Pump's items read in place; over: ended or closed (nothing more to
        # read); handed: its source was handed to a sink (`subscribe`)
        self._state = "new"
        self._failure: Exception | None = None  # what `ready` saw the source end with

    def __aiter__(self) -> Pulled[T]:
        return self

    async def __anext__(self) -> T:
        ready = self._ready
        if ready:
            return ready.popleft()
        return await self._next()

    def open(self) -> None:
        """Subscribe now, so the source's work begins, without waiting for an
        item (a Pump's generator begins at the first read)."""
        if self._state == "new" and not isinstance(self._source, Pump):
            self._open()

    async def ready(self) -> Exception | None:
        """Wait until an item (or the end) has come, without reading it:
        the error the source ended with before any item, else None."""
        if self._ready:
            return None
        try:
            item = await self._next()
        except StopAsyncIteration:
            return None
        except Exception as e:
            self._state = "failed"
            self._inbox = None
            self._failure = e
            return e
        self._ready.appendleft(item)  # (before what came with it)
        return None

    async def aclose(self) -> None:
        if self._state == "direct":
            self._state = "over"
            await _closed(self._pump().items)
            return
        self._close()

    # -- the switch: Source[T] ----------------------------------------------------------

    def subscribe(self, sink: Sink[T]) -> None:
        """Hand what was not read yet to `sink`, then the source itself: it
        puts its later items straight to `sink`, with no layer between."""
        state = self._state
        self._state = "handed"
        inbox, self._inbox = self._inbox, None
        items = list(self._ready)
        self._ready.clear()
        if inbox is not None:
            items.extend(inbox.take())
        keep = True
        try:
            for item in items:
                keep = sink.put(item)
            if state == "over" or state == "failed" or (inbox is not None and inbox.ended):
                error = (
                    inbox.error
                    if inbox is not None
                    else self._failure
                    if state == "failed"
                    else None
                )
                sink.end(error)
                return
        except Exception as e:
            self._source.stop()
            broken(sink, e, False)
            return
        self._source.subscribe(sink)
        if inbox is not None and inbox.held and keep:
            self._source.resume()

    def resume(self) -> None:
        self._source.resume()

    def stop(self) -> None:
        self._state = "over"
        self._inbox = None
        self._ready.clear()
        self._source.stop()

    # -- its own ------------------------------------------------------------------------

    async def _next(self) -> T:
        state = self._state
        if state == "new":
            source = self._source
            if isinstance(source, Pump) and not source.started:
                state = self._state = "direct"
            else:
                self._open()
                state = "reading"
        if state == "direct":
            try:
                return await self._pump().items.__anext__()
            except BaseException:  # its end, its error, or a cancel: the generator is done
                self._state = "over"
                raise
        inbox = self._inbox
        if state == "failed":
            self._state = "over"
            failure = self._failure
            assert failure is not None
            raise failure
        if inbox is None:
            raise StopAsyncIteration
        try:
            if not inbox.backlog.items:
                await self._wait(inbox)
        except BaseException:  # cancelled while it waited: the source stops too
            self._close()
            raise
        items = inbox.take()
        if not items:  # the end, and nothing before it
            self._state = "over"
            self._inbox = None
            if inbox.error is not None:
                raise inbox.error
            raise StopAsyncIteration
        if inbox.held and not inbox.ended:  # caught up: the source may go on
            inbox.held = False
            self._source.resume()
        if len(items) > 1:
            merge = self._merge
            if merge is not None:
                items = merge(items)
            self._ready.extend(items[1:])
        return items[0]

    def _pump(self) -> Pump[T]:
        source = self._source
        assert isinstance(source, Pump)
        return source

    def _open(self) -> _Inbox[T]:
        self._loop = asyncio.get_running_loop()
        inbox = self._inbox = _Inbox(self._weigh, self._window)
        self._state = "reading"
        self._source.subscribe(inbox)
        return inbox

    async def _wait(self, inbox: _Inbox[T]) -> None:
        loop = self._loop
        assert loop is not None
        while not inbox.backlog.items and not inbox.ended:
            waiter = inbox.waiter = loop.create_future()
            await waiter

    def _close(self) -> None:
        """Once: the reader leaves; a source that has not ended stops."""
        state, inbox = self._state, self._inbox
        if state in ("handed", "over"):
            return
        self._state = "over"
        self._inbox = None
        self._ready.clear()
        if state == "reading" and inbox is not None and not inbox.ended:
            self._source.stop()

    def __del__(self) -> None:
        """Dropped while reading: its source stops, in a turn of its own (the
        collector may run in the middle of an engine's step)."""
        if self._state != "reading":
            return
        inbox = self._inbox
        if inbox is None or inbox.ended:
            return
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon(self._source.stop)
        except RuntimeError:  # the loop is gone: nothing runs to stop
            pass


class Pump(Generic[T]):
    """A source over an async iterator (an engine that is a generator: echo,
    vLLM): a task reads it, in the context of whoever subscribed, and puts
    each item; a sink that says False pauses the task until `resume`. Stopped,
    the task is cancelled and the iterator closed."""

    __slots__ = ("_items", "_sink", "_task", "_paused")

    def __init__(self, items: AsyncIterator[T]) -> None:
        self._items = items
        self._sink: Sink[T] | None = None
        self._task: asyncio.Task[None] | None = None
        self._paused: asyncio.Future[None] | None = None

    @property
    def items(self) -> AsyncIterator[T]:
        """What it reads (a reader that pulls reads it in place: `Pulled`)."""
        return self._items

    @property
    def started(self) -> bool:
        return self._task is not None

    def subscribe(self, sink: Sink[T]) -> None:
        self._sink = sink
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def resume(self) -> None:
        paused = self._paused
        if paused is not None:
            self._paused = None
            if not paused.done():
                paused.set_result(None)

    def stop(self) -> None:
        self._sink = None
        task = self._task
        if task is not None and not task.done():
            task.cancel()
        elif task is None:  # never started: close the iterator all the same
            self._task = asyncio.get_running_loop().create_task(_closed(self._items))

    async def _run(self) -> None:
        items = self._items
        error: Exception | None = None
        try:
            async for item in items:
                sink = self._sink
                if sink is None:
                    return
                try:
                    keep = sink.put(item)
                except Exception as e:
                    self._sink = None
                    broken(sink, e, False)
                    return
                if not keep and self._sink is not None:
                    paused = self._paused = asyncio.get_running_loop().create_future()
                    await paused
        except asyncio.CancelledError:
            raise
        except Exception as e:
            error = e
        finally:
            await _closed(items)
        sink, self._sink = self._sink, None
        if sink is not None:
            try:
                sink.end(error)
            except Exception as e:
                broken(sink, e, True)


async def _closed(items: AsyncIterator[T]) -> None:
    aclose = getattr(items, "aclose", None)
    if aclose is not None:
        await aclose()
