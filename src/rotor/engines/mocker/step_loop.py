"""The mocker's step loop: what a real engine's core loop does, simulated.

One task schedules a batch, spends the step's simulated time (divided by
`speedup_ratio`), then samples each scheduled sequence's next tokens into
its request's outbox. At the engine's delivery points (after a slice of
steps at speedup 0, after each step at a real pace) every outbox that filled
goes to its stream (`MockerStream.deliver`), in the loop's own turn. A step
that breaks fails every request rather than leave its clients hanging.

A fault switch (`wedge`, docs/cli.md#the-wedge-switch) stops the steps
for a while or until `unwedge`, as a hung device would: requests are still
admitted and aborted and the event loop goes on (a worker keeps answering
NATS and renewing its lease), but nothing is computed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable

from rotor.engines.mocker.config import MockerConfig
from rotor.engines.mocker.handover import Holds
from rotor.engines.mocker.scheduler import Scheduler
from rotor.engines.mocker.sequence import Sequence, SequenceStatus
from rotor.engines.mocker.stream import OUTBOX_WINDOW, Closed, RequestState
from rotor.protocol.engine import EngineOutput

# The engine's log, named as before it was split up (its lines and filters keep it).
logger = logging.getLogger("rotor.engines.mocker.engine")

# At speedup ratio 0, the fewest steps a slice runs (a step of a large batch
# can take longer than the whole `step_slice_ms`).
MIN_SLICE_STEPS = 4


class StepLoop:
    """The loop over the scheduler's batches, and what it counts (steps,
    simulated time, tokens generated). The engine queues sequences in the
    scheduler and `requests`, then `wake`s it; outputs put outside a step
    (an abort) go through `put` and `deliver_soon`."""

    def __init__(
        self,
        config: MockerConfig,
        scheduler: Scheduler,
        requests: dict[str, RequestState],
        holds: Holds,
        max_seq_len: int,
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self.requests = requests  # the engine's running requests, by id
        self.holds = holds  # expired each step; a prefill's answer pins its blocks there
        self.max_seq_len = max_seq_len
        self.steps = 0
        self.simulated_ms = 0.0
        self.tokens_generated = 0
        # The requests whose outboxes hold outputs for their streams, handed
        # over at the next delivery point (MockerStream.deliver).
        self.due: list[RequestState] = []
        self._delivery_soon = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # How the loop waits out a step's simulated time (tests record it).
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        # At speedup ratio 0 a step takes no simulated time, and an engine on
        # its own device does not wait for the frontend between steps: steps
        # run back to back for `step_slice_ms` before the event loop serves
        # anyone else, and the outputs of those steps reach a reader together,
        # as a real engine's do when the frontend is busy. A step that gave an
        # answer its first token ends the slice early (once in a row: under
        # load nearly every step starts an answer). The slice's clock (tests
        # replace it):
        self.clock: Callable[[], float] = time.perf_counter
        self._slice_end = 0.0
        # At a ratio above 0: when the last step's outputs were due. The next
        # step is computed from then on, as a device computes while its
        # outputs are streamed, so the frontend's work on them (pushed in the
        # engine's own turn) does not lengthen the engine's steps: only when
        # it takes longer than a step does the engine fall behind. 0: idle.
        self._paced_until = 0.0
        self._cut_short = False  # the last slice ended early, at a first token
        self._slice_steps = 0
        # The fault switch: when the wedge ends (on `clock`; math.inf: at
        # `unwedge`), None: not wedged; what a waiting wedge waits on; how
        # many wedges there were.
        self._wedged_until: float | None = None
        self._unwedged: asyncio.Event | None = None
        self.wedges = 0

    # -- lifecycle -------------------------------------------------------

    def running(self) -> bool:
        """Started and not stopped since."""
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()  # bound to the running loop
            self._task = asyncio.create_task(self._loop(), name="mocker-step-loop")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def wake(self) -> None:
        """There is work: sequences queued, or a held request resumed."""
        self._wake.set()

    # -- the fault switch ----------------------------------------------------

    def wedge(self, seconds: float = 0.0) -> None:
        """Stop stepping for `seconds` (0: until `unwedge`), from the next
        step on; a wedge under way is replaced."""
        if not seconds >= 0:
            raise ValueError(f"a wedge lasts 0 (until switched off) or more seconds, not {seconds}")
        self._wedged_until = math.inf if seconds == 0 else self.clock() + seconds
        self.wedges += 1
        logger.warning(
            "mocker wedged %s: no step until then",
            "until switched off" if seconds == 0 else f"for {seconds:g} s",
        )
        if self._unwedged is not None:  # a wedge under way: its end is this one's
            self._unwedged.set()

    def unwedge(self) -> None:
        """Step again now (nothing happens when not wedged)."""
        if self._wedged_until is None:
            return
        self._wedged_until = None
        logger.warning("mocker unwedged: stepping again")
        if self._unwedged is not None:
            self._unwedged.set()
        self.wake()

    def wedged(self) -> float | None:
        """Seconds the wedge still lasts (math.inf: until switched off);
        None: not wedged."""
        until = self._wedged_until
        if until is None:
            return None
        return max(until - self.clock(), 0.0)

    async def _stay_wedged(self) -> None:
        """Wait out the wedge; what the steps before it made reaches its readers first."""
        self.deliver()
        while (until := self._wedged_until) is not None:
            left = until - self.clock()
            if left <= 0:
                self._wedged_until = None
                logger.warning("mocker unwedged: stepping again")
                break
            told = self._unwedged = asyncio.Event()
            if math.isinf(left):
                await told.wait()
                continue
            waits = {asyncio.ensure_future(told.wait()), asyncio.ensure_future(self.sleep(left))}
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
        self._unwedged = None
        self._paced_until = 0.0  # the next step starts now, as after idling
        self._start_slice()

    # -- the loop ----------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            if self._wedged_until is not None:
                await self._stay_wedged()
                continue
            if not self.scheduler.has_work():
                # cleared first: a delivery that resumes a held request wakes it again
                self._wake.clear()
                self.deliver()
                self._paced_until = 0.0  # idle: the next step starts when work comes
                await self._wake.wait()
                self._start_slice()
                self._cut_short = False
                continue
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must not hang every client
                logger.exception("mocker step failed")
                self.fail_all(f"mocker step failed: {exc}")

    async def _step(self) -> None:
        self.holds.expire()
        batch = self.scheduler.schedule()
        if not batch.items:  # the only running sequence preempted itself; admit next step
            await asyncio.sleep(0)
            return
        ms = self.config.step_ms(batch.prefill_tokens, batch.decode_seqs) + batch.load_ms
        self.simulated_ms += ms
        ratio = self.config.speedup_ratio
        if ratio > 0:
            await self._pace(ms / 1000.0 / ratio)
        self.steps += 1
        first = False
        for seq in self.scheduler.advance(batch):
            first |= self._sample(seq)
        if ratio == 0:
            await self._hand_over(first)
        else:
            self.deliver()  # a step at real pace: its outputs go now
        if self.steps == self.config.wedge_after_steps:  # the fault switch's flag
            self.wedge(self.config.wedge_seconds)

    async def _hand_over(self, first: bool) -> None:
        """At ratio 0, after a step: the event loop's turn once the slice is
        over (`step_slice_ms` and MIN_SLICE_STEPS both done), or at once when
        the step gave an answer its first token, unless the last slice already
        ended that way (under load nearly every step starts an answer)."""
        self._slice_steps += 1
        fewest = MIN_SLICE_STEPS if self.config.step_slice_ms > 0 else 1
        over = self._slice_steps >= fewest and self.clock() >= self._slice_end
        if over or (first and not self._cut_short):
            self._cut_short = not over
            self.deliver()  # the streams take the slice's outputs now
            await self.sleep(0)  # readers that pull, new requests
            self._start_slice()

    async def _pace(self, seconds: float) -> None:
        """Wait out a step of `seconds`, begun when the last one's outputs
        were due (or now, after idling or running late)."""
        now = self.clock()
        due = (self._paced_until or now) + seconds
        self._paced_until = max(due, now)
        await self.sleep(max(due - now, 0.0))

    def _start_slice(self) -> None:
        self._slice_end = self.clock() + self.config.step_slice_ms / 1000.0
        self._slice_steps = 0

    # -- delivery points -----------------------------------------------------

    def deliver(self) -> None:
        """A delivery point: every stream with outputs waiting gets them now,
        in the engine's own turn (MockerStream.deliver)."""
        due = self.due
        if not due:
            return
        self.due = []
        for req in due:
            stream = req.stream
            if stream is not None:
                stream.deliver()
            else:  # forgotten meanwhile: nobody reads
                req.outbox.take()

    def put(self, req: RequestState, item: EngineOutput | Closed) -> None:
        """An output (or a choice's close) into the request's outbox; the
        first since the last delivery makes the request due."""
        if req.outbox.put(item):
            self.due.append(req)

    def deliver_soon(self) -> None:
        """Outputs put outside the step loop (an abort, a failure) reach their
        readers in a turn of their own, not inside whoever caused them."""
        if self.due and not self._delivery_soon:
            self._delivery_soon = True

            def deliver() -> None:
                self._delivery_soon = False
                self.deliver()

            try:
                asyncio.get_running_loop().call_soon(deliver)
            except RuntimeError:  # no loop runs (a stream dropped at exit): nobody reads
                self._delivery_soon = False

    # -- sampling --------------------------------------------------------------

    def _sample(self, seq: Sequence) -> bool:
        """Append the sequence's next tokens and send them; True when they are
        its first."""
        req = self.requests[seq.request_id]
        tokens, source = seq.token_ids, seq.source
        generated = len(tokens) - seq.num_prompt_tokens
        first = generated == 0  # every output carries tokens or the finish
        out = source.next(generated, self.max_seq_len - len(tokens))
        ids = out.token_ids
        if req.prefill_only and ids:
            self.holds.hand_off(seq, out)  # keeps the first token, in the same list
        tokens.extend(ids)
        self.tokens_generated += len(ids)
        closed = source.closed
        if out.finish is None and not closed and len(tokens) >= self.max_seq_len:
            out.finish = "length"  # the sequence fills what the engine can hold
        if ids or out.finish is not None:
            index = out.index = seq.index
            maker = req.logprobs[index]
            if maker is not None:
                out.logprobs = [maker.make(t) for t in ids]
            if first:
                out.cached_tokens = req.cached_tokens
                if req.prompt_logprobs is not None:  # (the request's first output: once)
                    out.prompt_logprobs, req.prompt_logprobs = req.prompt_logprobs, None
            if req.outbox.put(out):
                self.due.append(req)
            req.unread += len(ids)
            if req.unread >= OUTBOX_WINDOW:
                self.scheduler.held.add(seq.request_id)
        if out.finish is not None or closed:
            self.scheduler.finish(seq)
        if closed:
            self.put(req, Closed(seq.index))
        return first

    def fail_all(self, message: str) -> None:
        """End every unfinished choice with an error (engine stopped or broken)."""
        for req in list(self.requests.values()):
            for seq in req.seqs:
                if seq.status is not SequenceStatus.FINISHED:
                    self.scheduler.finish(seq)
                    self.put(req, EngineOutput(index=seq.index, finish="error", error=message))
        self.deliver_soon()
