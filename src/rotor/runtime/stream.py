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
reading starts, and says when it is over), so a token passes one generator
on its way from the transport to the pipeline.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal

from rotor.protocol.engine import EngineError, EngineOutput, merge_outputs

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
        self._ready.set()

    def fail(self, error: EngineError) -> None:
        """The transport knows the peer is gone: the stream ends with `error`
        after what already arrived."""
        if self._failed is None:
            self._failed = error
            self._ready.set()

    # -- the consumer's side ---------------------------------------------------------

    async def read(self, send: Callable[[], Awaitable[None]]) -> AsyncIterator[EngineOutput]:
        """The request's outputs as they come. `send()` puts the request on
        its way when reading starts (a stream never read never sends it).
        Leaving early calls `abort` once."""
        open_choices = set(range(self.n))
        sent = ended = False
        stall = self.stall
        now = self.clock or asyncio.get_running_loop().time
        last_output: float | None = None  # the stall limit starts at the first output
        try:
            await send()
            sent = True
            while True:
                items = await self._take()
                outputs: list[EngineOutput] = []
                error: EngineError | None = None
                for seq, kind, payload in items:
                    try:
                        if not self._in_order(seq):
                            continue
                    except EngineError as gap:  # what came in order goes on first
                        error = gap
                        break
                    if kind == "outputs":
                        outputs.extend(payload)  # type: ignore[arg-type]
                    elif kind == "error":  # the engine's: its stream is over
                        error = payload  # type: ignore[assignment]
                        ended = True
                        break
                    elif kind == "done":
                        ended = True
                        break
                if outputs:
                    last_output = now()
                    for out in merge_outputs(outputs) if len(outputs) > 1 else outputs:
                        if out.finish is not None:
                            open_choices.discard(out.index)
                        yield out
                if error is not None:
                    raise error
                if ended:
                    return
                if not open_choices:  # every choice finished: the end is a formality
                    ended = True
                if stall is not None and last_output is not None and now() - last_output > stall:
                    raise EngineError(
                        f"{self.who} sent no output for {stall:.0f} s",
                        "unavailable",
                        cause="timeout",
                    )
        finally:
            if sent and not ended and open_choices:
                self.abort()
            if self.on_end is not None:
                self.on_end()

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
                raise EngineError(f"{self.who} stopped answering", "unavailable", cause="timeout")
        items = list(self._items)
        self._items.clear()
        return items

    def _in_order(self, seq: int) -> bool:
        """True for the next message; False for a repeat (dropped); a gap raises."""
        if seq == self._expect:
            self._expect += 1
            return True
        if seq < self._expect:
            log.warning("dropped a repeated stream message (seq %d)", seq)
            return False
        raise EngineError(f"lost stream messages {self._expect}..{seq - 1}", "unavailable")
