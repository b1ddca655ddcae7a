"""One engine request's output stream as a transport brings it: the one
reader both transports (NATS, the unix socket) use, a Source of engine
outputs (protocol/flow.py).

The transport hands each message of a request to its `OutputStream` the
moment it arrives (`put`, from the transport's callback: it never waits),
numbered by the engine's side from 0. Subscribed, the stream sends the
request (`send`) and, at the end of each turn of the event loop in which
messages came (one NATS batch, one socket read: every stream in it; or
several, when the frontend fell behind), hands them on:

- checked in sequence: a repeated message is dropped, a lost one is an
  error (never passed on as if the stream were whole);
- merged into as few outputs as possible (`merge_outputs`), so a burst costs
  the pipeline one step;
- its end: the engine's error, the transport's own (`fail`: the peer's
  connection or lease is gone), or the end of every choice;
- with a watch on silence: no message at all for `silence` seconds (the peer
  is gone; the engine side sends heartbeats while it works), or, once the
  first output came, no output for `stall` seconds (the engine is stuck
  mid-answer; before the first output a request may wait in a busy engine's
  queue as long as the engine's heartbeats say it is alive).

A sink that stops it early aborts the request on the engine's side
(`abort`): once, and not when every choice has already finished.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from rotor.protocol.engine import EngineError, EngineOutput, merge_outputs
from rotor.protocol.flow import Backlog, Sink, broken

log = logging.getLogger("rotor.runtime")

# What a message of the stream is: outputs (a list of EngineOutput), the
# engine's error (an EngineError: the stream ends), a heartbeat (the engine
# side is alive and working), the end of the stream, or (never sent: the
# transport's own) the peer gone.
Kind = Literal["outputs", "error", "heartbeat", "done", "failed"]
Payload = list[EngineOutput] | EngineError | None
Item = tuple[int, Kind, Payload]


class OutputStream:
    """The messages of one request (of `n` choices) as they arrive, handed on
    to its sink. `who` names the peer in errors; `send()` puts the request
    on its way (when first subscribed: a stream never subscribed sends
    nothing); `abort` stops the request there; `on_end` is called once the
    stream is done, however it ends; `silence` and `stall` are seconds (None:
    no limit); `clock` tells the time they are measured in (the event
    loop's by default)."""

    __slots__ = (
        "n",
        "who",
        "abort",
        "on_end",
        "silence",
        "stall",
        "_send",
        "_clock",
        "_backlog",
        "_expect",
        "_open",
        "_sink",
        "_sending",
        "_sent",
        "_ended",
        "_closed",
        "_error",
        "_pending",
        "_holding",
        "_last_output",
        "_last_heard",
        "_watch",
    )

    def __init__(
        self,
        n: int,
        who: str,
        send: Callable[[], Awaitable[None]],
        abort: Callable[[], None],
        on_end: Callable[[], None] | None = None,
        silence: float | None = None,
        stall: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.n = n
        self.who = who
        self.abort = abort
        self.on_end = on_end
        self.silence = silence
        self.stall = stall
        self._send = send
        self._clock = clock
        self._backlog: Backlog[Item] = Backlog()
        self._expect = 0  # the next message's number
        self._open = set(range(n))  # choices not finished yet
        self._sink: Sink[EngineOutput] | None = None
        self._sending: asyncio.Task[None] | None = None
        self._sent = False
        self._ended = False  # the engine's stream is over (done, its error, or every choice)
        self._closed = False
        self._error: EngineError | None = None  # the end, once what came before it went
        self._pending: list[EngineOutput] = []  # taken, not handed on yet (the sink holds)
        self._holding = False  # the sink said hold: nothing more until resume()
        self._last_output: float | None = None  # the stall limit starts at the first output
        self._last_heard = 0.0
        self._watch: asyncio.TimerHandle | None = None

    # -- the transport's side (never waits) ------------------------------------------

    def put(self, seq: int, kind: Kind, payload: Payload) -> None:
        if self._backlog.put((seq, kind, payload)):
            _due(self)

    def fail(self, error: EngineError) -> None:
        """The transport knows the peer is gone: the stream ends with `error`
        after what already arrived."""
        if self._backlog.put((-1, "failed", error)):
            _due(self)

    # -- Source[EngineOutput] ------------------------------------------------------------

    def subscribe(self, sink: Sink[EngineOutput]) -> None:
        if self._closed:
            raise RuntimeError("subscribe() after the stream's end")
        self._sink = sink
        if self._sending is None and not self._sent:
            loop = asyncio.get_running_loop()
            self._last_heard = self._now()
            self._sending = loop.create_task(self._start())

    def resume(self) -> None:
        """The sink takes outputs again: what came meanwhile goes now."""
        if self._holding:
            self._holding = False
            self._flush()

    def stop(self) -> None:
        self._sink = None
        self._close()

    # -- its own -------------------------------------------------------------------------

    async def _start(self) -> None:
        try:
            await self._send()
        except Exception as e:  # (EngineError: the peer is gone, or refuses)
            self._sending = None
            error = e if isinstance(e, EngineError) else EngineError(str(e), "unavailable")
            sink, self._sink = self._sink, None
            self._close()
            if sink is not None:
                sink.end(error)
            return
        self._sending = None
        self._sent = True
        self._arm()
        if self._backlog.listed:  # messages that came meanwhile
            _due(self)

    def deliver(self) -> None:
        """What the transport put since the last delivery, to the sink (at the
        end of the turn it came in)."""
        if self._sink is None or not self._sent:
            if self._closed:  # nobody reads it any more
                self._backlog.take()
            return  # (not sent yet: kept until it is)
        items = self._backlog.take()
        if not items:
            return
        self._last_heard = self._now()
        self._pending.extend(self._take(items))
        self._flush()

    def _flush(self) -> None:
        """The outputs waiting, unless the sink said hold; then the end."""
        sink = self._sink
        if sink is None or self._holding:
            return
        pending = self._pending
        if pending:
            self._pending = []
            if len(pending) > 1:  # what piled up while the sink held: one output per run
                pending = merge_outputs(pending)
            keep = True
            try:
                for out in pending:
                    keep = sink.put(out)
                    if self._sink is not sink:  # it stopped the stream itself
                        return
            except Exception as e:
                self.stop()
                broken(sink, e, False)
                return
            if not keep and not self._ended and self._error is None:
                self._holding = True  # (an end needs no room: it goes now)
                return
        if self._ended or self._error is not None:
            self._sink = None
            self._close()
            try:
                sink.end(self._error)
            except Exception as e:
                broken(sink, e, True)

    def _take(self, items: list[Item]) -> list[EngineOutput]:
        """The outputs of messages in order; notes the end and errors."""
        outputs: list[EngineOutput] = []
        for seq, kind, payload in items:
            if self._ended or self._error is not None:
                break
            if kind == "failed":  # the transport's: after what came before it
                assert isinstance(payload, EngineError)
                self._error = payload
                break
            try:
                if not self._in_order(seq):
                    continue
            except EngineError as gap:  # what came in order goes on first
                self._error = gap
                break
            if kind == "outputs":
                assert isinstance(payload, list)
                outputs.extend(payload)
            elif kind == "error":  # the engine's: its stream is over
                assert isinstance(payload, EngineError)
                self._error = payload
                self._ended = True
            elif kind == "done":
                self._ended = True
        if outputs:
            self._last_output = self._now()
            for out in outputs:
                if out.finish is not None:
                    self._open.discard(out.index)
        if not self._open:  # every choice finished: the end is a formality
            self._ended = True
        stall = self.stall
        if (
            stall is not None
            and self._last_output is not None
            and not outputs
            and self._error is None
            and self._now() - self._last_output > stall
        ):
            self._error = self.stalled()
        return outputs

    def _in_order(self, seq: int) -> bool:
        """True for the next message; False for a repeat (dropped); a gap raises."""
        if seq == self._expect:
            self._expect += 1
            return True
        if seq < self._expect:
            log.warning("dropped a repeated stream message (seq %d)", seq)
            return False
        raise EngineError(f"lost stream messages {self._expect}..{seq - 1}", "unavailable")

    def _now(self) -> float:
        clock = self._clock
        return clock() if clock is not None else asyncio.get_running_loop().time()

    def silent(self) -> EngineError:
        """The error of a worker past the silence limit."""
        return EngineError(f"{self.who} stopped answering", "unavailable", cause="timeout")

    def stalled(self) -> EngineError:
        """The error of a worker past the stall limit (messages, but no output)."""
        return EngineError(
            f"{self.who} sent no output for {self.stall:.0f} s", "unavailable", cause="timeout"
        )

    def _arm(self) -> None:
        limits = [x for x in (self.silence, self.stall) if x is not None]
        if limits and not self._closed:
            loop = asyncio.get_running_loop()
            self._watch = loop.call_later(min(limits) / 4, self._check)

    def _check(self) -> None:
        """The limits are a timer's: silence (no message at all) and, once an
        output came, stall (no output)."""
        self._watch = None
        if self._sink is None:
            return
        now = self._now()
        if self.silence is not None and now - self._last_heard > self.silence:
            self.fail(self.silent())
            return
        last, stall = self._last_output, self.stall
        if stall is not None and last is not None and now - last > stall:
            self.fail(self.stalled())
            return
        self._arm()

    def _close(self) -> None:
        """Once: abort the request there if it still runs, say the stream is over."""
        if self._closed:
            return
        self._closed = True
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        sending, self._sending = self._sending, None
        if sending is not None:
            sending.cancel()
        if self._sent and not self._ended and self._open:
            self.abort()
        if self.on_end is not None:
            self.on_end()


# Streams with messages waiting, handed them at the end of the event loop's
# turn: every message that arrived in one turn (a transport that fell behind
# reads several at once) reaches its sink as one push, merged.
_DUE: dict[asyncio.AbstractEventLoop, list[OutputStream]] = {}  # each loop's, until its turn ends


def _due(stream: OutputStream) -> None:
    loop = asyncio.get_running_loop()
    due = _DUE.get(loop)
    if due is None:
        due = _DUE[loop] = []
        loop.call_soon(_push_due, loop)
    due.append(stream)


def _push_due(loop: asyncio.AbstractEventLoop) -> None:
    for stream in _DUE.pop(loop, []):
        try:
            stream.deliver()
        except Exception:  # a bug: the other streams still get theirs
            log.exception("pushing the stream of %s failed", stream.who)
