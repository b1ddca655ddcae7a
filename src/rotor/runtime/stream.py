"""One engine request's output stream, as a transport delivers it and the
frontend reads it: the one reader both transports (NATS, the unix socket) use.

The transport hands each message of a request to its `OutputStream` the
moment it arrives (`put`, from the transport's callback: it never waits),
numbered by the engine's side from 0. The request's consumer reads with
`read`, which

- checks the sequence: a repeated message is dropped, a lost one is an error
  (never passed on as if the stream were whole);
- merges what piled up while the consumer was busy into as few outputs as
  possible (`merge_outputs`), so a burst costs the pipeline one step;
- turns silence into an error: no message at all for `silence` seconds (the
  peer is gone; the engine side sends heartbeats while it works), or, once
  the first output came, no output for `stall` seconds (the engine is stuck
  mid-answer; before the first output a request may wait in a busy engine's
  queue as long as the engine's heartbeats say it is alive);
- ends with the engine's error, or a transport's own (`fail`: the peer's
  connection or lease is gone);
- aborts the request (`abort`) when the consumer leaves before the end: once,
  and not when every choice has already finished.

`read` is the whole of a transport's `generate` (it sends the request when
reading starts, and says when it is over): a `Reading`, read one output at a
time, or, once its reader has what it needed (the first output), pushed
(rotor.protocol.engine.Pushed): then what the transport put in one turn of
the event loop (one NATS batch, one socket read: every stream in it; or
several, when the frontend fell behind) is checked, merged and handed to
each reader at the end of that turn, and the silence and stall limits are
watched by a timer instead of a waiting reader.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from rotor.protocol.engine import (
    Delivery,
    EngineError,
    EngineOutput,
    delivery_broke,
    merge_outputs,
)

log = logging.getLogger("rotor.runtime")

# What a message of the stream is: outputs (a list of EngineOutput), the
# engine's error (an EngineError: the stream ends), a heartbeat (the engine
# side is alive and working), or the end of the stream.
Kind = Literal["outputs", "error", "heartbeat", "done"]
Item = tuple[int, Kind, "list[EngineOutput] | EngineError | None"]


class OutputStream:
    """The messages of one request (of `n` choices) as they arrived, and the
    reader of them. `who` names the peer in errors; `abort` stops the request
    there; `on_end` is called once the reader is done, however it ends;
    `silence` and `stall` are seconds (None: no limit); `clock` tells the
    time `stall` is measured in (the event loop's by default)."""

    __slots__ = (
        "_items",
        "_ready",
        "_expect",
        "_failed",
        "_pushed",
        "n",
        "who",
        "abort",
        "on_end",
        "silence",
        "stall",
        "clock",
    )

    def __init__(
        self,
        n: int,
        who: str,
        abort: Callable[[], None],
        on_end: Callable[[], None] | None = None,
        silence: float | None = None,
        stall: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._items: collections.deque[Item] = collections.deque()
        self._ready = asyncio.Event()
        self._expect = 0
        self._failed: EngineError | None = None
        self._pushed: Reading | None = None  # a reading that takes each message as it comes
        self.n = n
        self.who = who
        self.abort = abort
        self.on_end = on_end
        self.silence = silence
        self.stall = stall
        self.clock = clock

    # -- the transport's side (never waits) ------------------------------------------

    def put(self, seq: int, kind: Kind, payload: list[EngineOutput] | EngineError | None) -> None:
        self._items.append((seq, kind, payload))
        if self._pushed is not None:
            _due(self._pushed)
        else:
            self._ready.set()

    def fail(self, error: EngineError) -> None:
        """The transport knows the peer is gone: the stream ends with `error`
        after what already arrived."""
        if self._failed is None:
            self._failed = error
            if self._pushed is not None:
                _due(self._pushed)
            else:
                self._ready.set()

    # -- the consumer's side ---------------------------------------------------------

    def read(self, send: Callable[[], Awaitable[None]]) -> Reading:
        """The request's outputs as they come. `send()` puts the request on
        its way when reading starts (a stream never read never sends it).
        Leaving early calls `abort` once."""
        return Reading(self, send)

    def taken(self) -> list[Item]:
        """Everything that arrived, without waiting."""
        items = list(self._items)
        self._items.clear()
        return items

    async def _take(self) -> list[Item]:
        """Everything that arrived; waits for it up to `silence` seconds.

        Not `asyncio.wait_for`: before Python 3.12 it returns the result when
        the wait ends in the same turn as a cancel, swallowing the cancel (a
        client that left then kept its stream running to the end). A timer
        that wakes the same event also costs no task per message."""
        if not self._items:
            if self._failed is not None:
                raise self._failed
            self._ready.clear()
            silence = self.silence
            if silence is None:
                await self._ready.wait()
            else:
                timer = asyncio.get_running_loop().call_later(silence, self._ready.set)
                try:
                    await self._ready.wait()
                finally:
                    timer.cancel()
            if not self._items:
                if self._failed is not None:
                    raise self._failed
                raise self.silent()
        return self.taken()

    def silent(self) -> EngineError:
        """The error of a worker past the silence limit."""
        return EngineError(f"{self.who} stopped answering", "unavailable", cause="timeout")

    def stalled(self) -> EngineError:
        """The error of a worker past the stall limit (messages, but no output)."""
        return EngineError(
            f"{self.who} sent no output for {self.stall:.0f} s", "unavailable", cause="timeout"
        )

    def _in_order(self, seq: int) -> bool:
        """True for the next message; False for a repeat (dropped); a gap raises."""
        if seq == self._expect:
            self._expect += 1
            return True
        if seq < self._expect:
            log.warning("dropped a repeated stream message (seq %d)", seq)
            return False
        raise EngineError(f"lost stream messages {self._expect}..{seq - 1}", "unavailable")


# Pushed readings with messages waiting, handed them at the end of the
# event loop's turn: every message that arrived in one turn (a transport
# that fell behind reads several at once) reaches its reader as one push,
# merged, as a reader that pulls would have read it.
_DUE: dict[asyncio.AbstractEventLoop, list[Reading]] = {}  # each loop's, until its turn ends


def _due(reading: Reading) -> None:
    if not reading._listed:
        reading._listed = True
        loop = asyncio.get_running_loop()
        due = _DUE.get(loop)
        if due is None:
            due = _DUE[loop] = []
            loop.call_soon(_push_due, loop)
        due.append(reading)


def _push_due(loop: asyncio.AbstractEventLoop) -> None:
    due = _DUE.pop(loop, [])
    for reading in due:  # all off the list first: one that fails leaves none stuck on it
        reading._listed = False
    for reading in due:
        reading.push()


class Reading:
    """One reader of an `OutputStream`: pulled (`__anext__`), or pushed once
    it has begun (`deliver`, rotor.protocol.engine.Pushed). Either way each
    message goes through `_take`: in order, merged, the end and errors."""

    __slots__ = (
        "_stream",
        "_send",
        "_open",
        "_sent",
        "_ended",
        "_closed",
        "_ready",
        "_error",
        "_last_output",
        "_last_heard",
        "_now",
        "_delivery",
        "_pending",
        "_holding",
        "_watch",
        "_listed",
    )

    def __init__(self, stream: OutputStream, send: Callable[[], Awaitable[None]]) -> None:
        self._stream = stream
        self._send = send
        self._open = set(range(stream.n))  # choices not finished yet
        self._sent = False
        self._ended = False  # the engine's stream is over (done, its error, or every choice)
        self._closed = False
        self._ready: collections.deque[EngineOutput] = collections.deque()
        self._error: EngineError | None = None  # raised once what came before it was read
        self._last_output: float | None = None  # the stall limit starts at the first output
        self._last_heard = 0.0
        self._now: Callable[[], float] | None = None
        self._delivery: Delivery | None = None
        self._pending: list[EngineOutput] = []  # taken, not handed to the delivery yet
        self._holding = False  # the delivery said hold: nothing more until resume()
        self._watch: asyncio.TimerHandle | None = None
        self._listed = False  # due at the end of the turn

    # -- pulled ----------------------------------------------------------------------

    def __aiter__(self) -> Reading:
        return self

    async def __anext__(self) -> EngineOutput:
        ready = self._ready
        if ready:
            return ready.popleft()
        try:
            if not self._sent:
                self._now = self._stream.clock or asyncio.get_running_loop().time
                await self._send()
                self._sent = True
            while True:
                if self._error is not None:
                    raise self._error
                if self._ended:
                    raise StopAsyncIteration
                ready.extend(self._take(await self._stream._take()))
                if ready:
                    return ready.popleft()
        except BaseException:
            self._close()
            raise

    async def aclose(self) -> None:
        self._close()

    # -- pushed ----------------------------------------------------------------------

    @property
    def pushable(self) -> bool:
        """Sent (read once) and not over."""
        return self._sent and not self._closed

    def deliver(self, delivery: Delivery) -> None:
        """Push from now on: what was read but not taken, and what arrived,
        goes to `delivery` now; each later message as the transport puts it."""
        if not self._sent or self._closed:
            raise RuntimeError("deliver() before the first output was read, or after the end")
        self._delivery = delivery
        self._stream._pushed = self
        self._last_heard = self._now()  # type: ignore[misc]
        self._arm()
        self._pending.extend(self._ready)
        self._ready.clear()
        self.push()

    def resume(self) -> None:
        """The delivery can take outputs again: what came meanwhile goes now."""
        if self._holding:
            self._holding = False
            self._flush()

    def stop(self) -> None:
        self._delivery = None
        self._close()

    def push(self) -> None:
        """What the transport put since, to the delivery (the transport's call)."""
        if self._delivery is None:
            return
        stream = self._stream
        items = stream.taken()
        if items:
            self._last_heard = self._now()  # type: ignore[misc]
            self._pending.extend(self._take(items))
        if stream._failed is not None and not self._ended and self._error is None:
            self._error = stream._failed  # after what arrived before it
        self._flush()

    def _flush(self) -> None:
        """The outputs waiting, unless the delivery said hold; then the end."""
        delivery = self._delivery
        if delivery is None or self._holding:
            return
        pending = self._pending
        if pending:
            self._pending = []
            if len(pending) > 1:  # what piled up while the reader held: one output per run
                pending = merge_outputs(pending)
            try:
                keep = delivery.outputs(pending)
            except Exception as e:
                self.stop()
                delivery_broke(delivery, e, False)
                return
            if self._delivery is None:  # it stopped the stream itself
                return
            if not keep and not self._ended and self._error is None:
                self._holding = True  # (an end needs no room: it goes now)
                return
        if self._ended or self._error is not None:
            self._delivery = None
            self._close()
            try:
                delivery.ended(self._error)
            except Exception as e:
                delivery_broke(delivery, e, True)

    def _arm(self) -> None:
        limits = [x for x in (self._stream.silence, self._stream.stall) if x is not None]
        if limits:
            loop = asyncio.get_running_loop()
            self._watch = loop.call_later(min(limits) / 4, self._check)

    def _check(self) -> None:
        """Pushed, the limits are a timer's: silence (no message at all) and,
        once an output came, stall (no output)."""
        self._watch = None
        if self._delivery is None:
            return
        now = self._now()  # type: ignore[misc]
        stream = self._stream
        if stream.silence is not None and now - self._last_heard > stream.silence:
            stream.fail(stream.silent())
            return
        last, stall = self._last_output, stream.stall
        if stall is not None and last is not None and now - last > stall:
            stream.fail(stream.stalled())
            return
        self._arm()

    # -- both -----------------------------------------------------------------------------

    def _take(self, items: list[Item]) -> list[EngineOutput]:
        """The outputs of messages in order, merged; notes the end and errors."""
        outputs: list[EngineOutput] = []
        stream = self._stream
        for seq, kind, payload in items:
            try:
                if not stream._in_order(seq):
                    continue
            except EngineError as gap:  # what came in order goes on first
                self._error = gap
                break
            if kind == "outputs":
                outputs.extend(payload)  # type: ignore[arg-type]
            elif kind == "error":  # the engine's: its stream is over
                self._error = payload  # type: ignore[assignment]
                self._ended = True
                break
            elif kind == "done":
                self._ended = True
                break
        if outputs:
            self._last_output = self._now()  # type: ignore[misc]
            if len(outputs) > 1:
                outputs = merge_outputs(outputs)
            for out in outputs:
                if out.finish is not None:
                    self._open.discard(out.index)
        if not self._open:  # every choice finished: the end is a formality
            self._ended = True
        stall = stream.stall
        if (
            stall is not None
            and self._last_output is not None
            and not outputs
            and self._error is None
            and self._now() - self._last_output > stall  # type: ignore[misc]
        ):
            self._error = stream.stalled()
        return outputs

    def _close(self) -> None:
        """Once: abort the request there if it still runs, say the reading is over."""
        if self._closed:
            return
        self._closed = True
        stream = self._stream
        stream._pushed = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._sent and not self._ended and self._open:
            stream.abort()
        if stream.on_end is not None:
            stream.on_end()
