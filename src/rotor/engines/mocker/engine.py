"""MockerEngine: the Engine interface over a simulated step loop.

One background task does what a real engine's core loop does: schedule a
batch, spend the step's simulated time (divided by `speedup_ratio`), then
append the sampled tokens and send each choice's output to its request's
queue. `generate` only admits sequences and reads the queue, so the timing,
batching, prefix reuse and preemption a client sees come from the scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rotor.engines.adapters import AdapterBook
from rotor.engines.base import KVFetch
from rotor.engines.mocker.config import MockerConfig
from rotor.engines.mocker.constrained import constrained_text, refuse_unsupported
from rotor.engines.mocker.embed import shortened, unit_vector
from rotor.engines.mocker.handover import Fetcher, Holds
from rotor.engines.mocker.sampler import LogprobMaker, RandomSource, biased, readable_vocab
from rotor.engines.mocker.scheduler import Scheduler
from rotor.engines.mocker.script import ScriptSource, parse_script
from rotor.engines.mocker.sequence import Sequence, SequenceStatus, TokenSource
from rotor.engines.mocker.stream import OUTBOX_WINDOW, Closed, MockerStream, RequestState
from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    RESUME_FROM,
    EngineError,
    EngineOutput,
    EngineRequest,
    EngineState,
)
from rotor.protocol.kv import KVEvent, KVSnapshot, lora_root
from rotor.protocol.mock import MockScript

logger = logging.getLogger(__name__)

# At speedup ratio 0, the fewest steps a slice runs (a step of a large batch
# can take longer than the whole `step_slice_ms`).
MIN_SLICE_STEPS = 4

# Scripts longer than this (all choices' texts together) are tokenized off
# the event loop: a 1 MB script takes a third of a second to tokenize, and
# sixteen of them admitted at once held the loop (`/live` too) for seconds.
# The tokenizer releases the GIL while it works, so the loop really runs
# meanwhile. Shorter ones are tokenized on the loop: the hop costs more.
OFF_LOOP_SCRIPT_CHARS = 4096
# One thread tokenizes long scripts, one after another, as the loop did: a
# tokenization peaks at ~170 bytes per character of script (1.4 GB for 8 MB),
# so running them side by side would multiply the worst case.
SCRIPT_WORKERS = 1


class MockerEngine:
    def __init__(
        self, card: ModelCard, tokenizer: Tokenizer, config: MockerConfig | None = None
    ) -> None:
        self.config = config = config or MockerConfig()
        caps = dataclasses.replace(
            card.capabilities,
            logprobs=True,
            mock_scripts=True,
            structural_tags=config.structural_tags,
            kv_block_size=config.block_size,
            embedding_dim=config.embedding_dim,
            generates=config.embedding_dim == 0,
            shortens_embeddings=True,
        )
        # The card tells the frontend how long a sequence may get, so its context
        # check (prompt + max_tokens) also keeps every request within the KV cache.
        self.card = dataclasses.replace(
            card,
            capabilities=caps,
            context_length=min(card.context_length, config.capacity_tokens),
        )
        self.tokenizer = tokenizer
        self.scheduler = Scheduler(config)
        self.max_seq_len = self.card.context_length
        self.vocab = readable_vocab(tokenizer)
        self.steps = 0
        self.simulated_ms = 0.0
        self.tokens_generated = 0
        self._requests: dict[str, RequestState] = {}
        # The requests whose outboxes hold outputs for their streams, handed
        # over at the next delivery point (MockerStream.deliver).
        self.due: list[RequestState] = []
        self._delivery_soon = False
        self.holds = Holds(self.scheduler.kv, config.kv_hold_timeout_s)
        self.fetcher = Fetcher(self.scheduler.kv, config, lambda: self._task is not None)
        self._adapters = AdapterBook()  # LoRA adapters: each changes the seeded output
        # Requests whose long script is being tokenized off the loop, and the
        # choices aborted meanwhile (None: all of them), applied once admitted.
        self._tokenizing: dict[str, set[int] | None] = {}
        self._script_pool: ThreadPoolExecutor | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # How the step loop waits out a step's simulated time (tests record it).
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        # At speedup ratio 0 a step takes no simulated time, and an engine on
        # its own device does not wait for the frontend between steps: steps
        # run back to back for `step_slice_ms` before the event loop serves
        # anyone else, and the outputs of those steps reach a reader together,
        # as a real engine's do when the frontend is busy. A step that gave an
        # answer its first token ends the slice early (once in a row: under
        # load nearly every step starts an answer). The slice's clock:
        self._clock: Callable[[], float] = time.perf_counter
        self._slice_end = 0.0
        # At a ratio above 0: when the last step's outputs were due. The next
        # step is computed from then on, as a device computes while its
        # outputs are streamed, so the frontend's work on them (pushed in the
        # engine's own turn) does not lengthen the engine's steps: only when
        # it takes longer than a step does the engine fall behind. 0: idle.
        self._paced_until = 0.0
        self._cut_short = False  # the last slice ended early, at a first token
        self._slice_steps = 0

    # -- lifecycle -------------------------------------------------------

    async def start(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()  # bound to the running loop
            self._script_pool = ThreadPoolExecutor(
                SCRIPT_WORKERS, thread_name_prefix="rotor-mocker-script"
            )
            self._task = asyncio.create_task(self._loop(), name="mocker-step-loop")

    async def stop(self) -> None:
        task, self._task = self._task, None
        pool, self._script_pool = self._script_pool, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if pool is not None:
            pool.shutdown(wait=False)  # a script still tokenizing is refused once done
        self.fetcher.stop()  # its request is refused
        self._fail_all("engine stopped")

    # -- Engine interface --------------------------------------------------

    def generate(self, request: EngineRequest) -> MockerStream:
        """The request's outputs until every choice has ended (admitted when
        first subscribed); stopping the stream aborts whatever still runs."""
        return MockerStream(self, request)

    async def admit(self, request: EngineRequest, stream: MockerStream) -> RequestState:
        """Check the request and queue its sequences, read by `stream` (after
        its KV fetch, or its long script's tokenization); an abort that came
        meanwhile applies now."""
        script = self._parse(request)
        self._check_admissible(request.request_id)
        rid = request.request_id
        transfer = request.annotations.get(KV_TRANSFER)
        if transfer is not None:
            self._tokenizing.setdefault(rid, set())  # an abort meanwhile applies once admitted
            try:
                await self.fetcher.fetch_blocks(request, transfer)
            except BaseException:
                self._tokenizing.pop(rid, None)
                raise
        ids = await self._script_ids(request, script) if script is not None else None
        aborted = self._tokenizing.pop(rid, set())  # while it was tokenized
        req = self._admit(request, stream, script, ids)
        if aborted is None:
            self.abort(rid)
        for index in sorted(aborted or ()):
            self.abort(rid, index)
        return req

    def adapter_in_use(self, name: str | None) -> contextlib.AbstractContextManager[Any]:
        """The request's adapter (None: the base model) kept while it runs."""
        return self._adapters.using(name)

    def forget(self, request_id: str, abort: bool) -> None:
        """Its stream is done: stop what still runs (`abort`), drop the request."""
        if abort:
            self.abort(request_id)
        req = self._requests.pop(request_id, None)
        if req is not None:
            req.outbox.take()  # (its stream reads no more of it)
        self.scheduler.held.discard(request_id)

    def hold_request(self, request_id: str) -> None:
        """Its reader is behind: compute nothing more for it until it resumes."""
        self.scheduler.held.add(request_id)

    def resume_request(self, request_id: str) -> None:
        held = self.scheduler.held
        if held and request_id in held:
            held.discard(request_id)
            self._wake.set()

    async def embed(self, inputs: list[list[int]], dimensions: int | None) -> list[list[float]]:
        """A unit vector per input (engines/mocker/embed.py), after the simulated time
        of prefilling them all in one step."""
        dim = self.card.capabilities.embedding_dim
        if dim == 0:
            raise EngineError(
                f"the model {self.card.name!r} cannot embed (start the mocker with --runner pooling)",
                "refused",
                "model",
            )
        if dimensions is not None and dimensions > dim:
            raise EngineError(
                f"dimensions {dimensions} is more than the model's {dim}", "refused", "dimensions"
            )
        ratio = self.config.speedup_ratio
        if ratio > 0:
            tokens = sum(len(ids) for ids in inputs)
            await self._sleep(self.config.step_ms(tokens, 0) / 1000 / ratio)
        return [shortened(unit_vector(ids, dim), dimensions) for ids in inputs]

    # -- LoRA adapters -------------------------------------------------------

    def adapters(self) -> dict[str, str]:
        return self._adapters.names()

    async def load_adapter(self, name: str, path: str) -> None:
        """Check the adapter's files, then spend its simulated load time. Its
        requests' seeded output differs from the base model's (and another
        adapter's), the same each time; a `mock` script plays as written."""
        adapter = self._adapters.check(name, path)
        ratio = self.config.speedup_ratio
        if ratio > 0 and self.config.lora_load_ms > 0:
            await self._sleep(self.config.lora_load_ms / 1000 / ratio)
        self._adapters.add(adapter)

    async def unload_adapter(self, name: str) -> None:
        self._adapters.remove(name)

    def abort(self, request_id: str, index: int | None = None) -> None:
        """Stop one choice (or all): its blocks are freed now and the consumer
        sees no further output for it, even output already queued."""
        if request_id in self._tokenizing:  # aborted once it is admitted
            aborted = self._tokenizing[request_id]
            if aborted is not None:
                if index is None:
                    self._tokenizing[request_id] = None
                else:
                    aborted.add(index)
            return
        req = self._requests.get(request_id)
        if req is None:
            return
        for seq in req.seqs:
            if (index is not None and seq.index != index) or seq.index in req.aborted:
                continue
            req.aborted.add(seq.index)  # outputs still queued for it are dropped too
            self.scheduler.finish(seq)
            self._put(req, Closed(seq.index))
        self._deliver_soon()

    def state(self) -> EngineState:
        kv = self.scheduler.kv
        self.holds.expire()
        return EngineState(
            active_requests=len(self._requests) + len(self._tokenizing),
            waiting=len(self.scheduler.waiting),
            running=len(self.scheduler.running),
            tokens_generated=self.tokens_generated,
            kv_blocks_total=kv.num_total,
            kv_blocks_free=kv.num_free,
            kv_blocks_cached=kv.num_cached,
            pending_prefill_tokens=self.scheduler.pending_prefill_tokens(),
            preemptions=self.scheduler.preemptions,
            steps=self.steps,
            simulated_ms=self.simulated_ms,
            kv_blocks_pinned=self.holds.num_pinned,
            kv_hold_timeouts=self.holds.timeouts,
            kv_blocks_fetched=self.fetcher.blocks_fetched,
            kv_fetch_failures=self.fetcher.failures,
            max_batched_tokens=self.config.max_num_batched_tokens,
        )

    # -- admission -----------------------------------------------------------

    def _eos_id(self, request: EngineRequest) -> int | None:
        eos = self.card.eos_token_ids or request.stop.eos_token_ids
        return eos[0] if eos else None

    def _parse(self, request: EngineRequest) -> MockScript | None:
        """Check the request; its parsed `mock` script, or None for seeded output."""
        if request.n < 1:
            raise EngineError(f"n must be at least 1, got {request.n}", "refused", "n")
        if not request.token_ids:
            raise EngineError("token_ids: the prompt is empty", "refused", "prompt")
        if len(request.token_ids) >= self.max_seq_len:
            # The frontend's context check (against this engine's card) comes
            # first; this one keeps a direct caller from queueing a sequence that
            # could never be scheduled.
            raise EngineError(
                f"token_ids: the prompt has {len(request.token_ids)} tokens; this engine "
                f"holds at most {self.max_seq_len} per sequence, prompt and output",
                "refused",
                "prompt",
            )
        raw = request.annotations.get("mock")
        if raw is None:
            refuse_unsupported(request.sampling.guided)
            if request.stop.max_tokens < 1:
                raise EngineError(
                    f"stop.max_tokens must be at least 1, got {request.stop.max_tokens}",
                    "refused",
                    "max_tokens",
                )
            return None
        script = parse_script(raw, request.n)
        if script.end in ("eos", "eos_hidden") and self._eos_id(request) is None:
            raise EngineError(
                f"mock.end {script.end!r}: the model has no EOS token id", "refused", "mock"
            )
        return script

    def _check_admissible(self, rid: str) -> None:
        if self._task is None:
            raise EngineError("the mocker engine is not started", "unavailable")
        if rid in self._requests or rid in self._tokenizing:
            raise EngineError(f"request_id {rid!r} is already running", "internal")

    async def _script_ids(self, request: EngineRequest, script: MockScript) -> list[list[int]]:
        """The token ids of each of the script's texts (its one text, or one
        per choice), as many as the request can play (`_playable`); a long
        script's are made in the script pool, off the loop, and the engine
        may have been stopped by the time they come."""
        texts = _texts(script)
        encode, keep = self.tokenizer.encode, self._playable(request)

        def ids_of(text: str) -> list[int]:
            ids = encode(text)
            return ids if len(ids) <= keep else ids[:keep]

        if sum(map(len, texts)) <= OFF_LOOP_SCRIPT_CHARS:
            return [ids_of(text) for text in texts]
        pool = self._script_pool
        assert pool is not None  # started: `_check_admissible`
        rid = request.request_id
        self._tokenizing.setdefault(rid, set())
        logger.debug("request %s: its mock script is tokenized off the event loop", rid)
        try:
            ids = await asyncio.get_running_loop().run_in_executor(
                pool, lambda: [ids_of(text) for text in texts]
            )
        except BaseException:
            self._tokenizing.pop(rid, None)
            raise
        logger.debug(
            "request %s: its mock script is tokenized (%d characters, %d tokens kept)",
            rid,
            sum(map(len, texts)),
            sum(map(len, ids)),
        )
        if self._script_pool is not pool:
            self._tokenizing.pop(rid, None)
            raise EngineError("engine stopped", "unavailable")
        return ids

    def _playable(self, request: EngineRequest) -> int:
        """How many of a script's tokens the request can reach, and one more: a
        sequence fills (finish `length`) after `max_seq_len - prompt` tokens,
        from `resume_from` on, so a script cut there plays as the whole one
        does, and a 1 MB script keeps 32k ids in memory, not 800k."""
        resume = int(request.annotations.get(RESUME_FROM, 0))
        return max(resume, 0) + max(self.max_seq_len - len(request.token_ids), 0) + 1

    def _admit(
        self,
        request: EngineRequest,
        stream: MockerStream,
        parsed: MockScript | None,
        script_ids: list[list[int]] | None = None,
    ) -> RequestState:
        """Queue the request's sequences, read by `stream`; `script_ids`: the
        token ids of the script's texts (`_script_ids`), when it has one."""
        eos_id = self._eos_id(request)
        seqs: list[Sequence] = []
        makers: list[LogprobMaker | None] = []
        seeded = request.sampling.seed is not None
        resume = max(int(request.annotations.get(RESUME_FROM, 0)), 0)
        root = lora_root(request.lora)
        for index in range(request.n):
            if seeded:
                key = f"{request.sampling.seed}:{index}"
            else:
                key = f"{self.config.seed}:{request.request_id}:{index}"
            if request.lora is not None:  # an adapter's answer is its own
                key += f":lora:{request.lora}"
            source: TokenSource
            guided = request.sampling.guided
            text = None
            if parsed is None and guided is not None:
                text = constrained_text(guided, random.Random("guided:" + key))
            if parsed is not None:
                assert script_ids is not None, "a script's texts are tokenized before admission"
                ids = script_ids[0 if isinstance(parsed.outputs, str) else index]
                source = ScriptSource(ids, parsed.end, parsed.tokens_per_step, eos_id)
                # A request resumed on this engine after another one died: the
                # script goes on where that one stopped.
                source.pos = min(int(request.annotations.get(RESUME_FROM, 0)), len(ids))
            elif text is not None:
                # A constrained answer ends where the constraint ends it.
                end = "eos" if eos_id is not None else "stop"
                source = ScriptSource(self.tokenizer.encode(text), end, 1, eos_id)
            else:
                source = RandomSource(
                    random.Random(key),
                    biased(self.vocab, request.sampling.logit_bias),
                    eos_id,
                    request.stop,
                    self.config.eos_probability,
                )
                if seeded:
                    source.skip(resume)
            seqs.append(Sequence(request.request_id, index, request.token_ids, source, root))
            maker = None
            if request.output.logprobs:
                maker = LogprobMaker(
                    random.Random("logprobs:" + key), self.vocab, request.output.top_logprobs
                )
                if seeded:
                    maker.skip(resume)
            makers.append(maker)
        req = RequestState(seqs, makers, stream)
        req.prefill_only = bool(request.annotations.get(PREFILL_ONLY))
        self._requests[request.request_id] = req
        for seq in seqs:
            self.scheduler.add(seq)
        self._wake.set()
        return req

    # -- the step loop -----------------------------------------------------

    async def _loop(self) -> None:
        while True:
            if not self.scheduler.has_work():
                self._deliver()
                self._wake.clear()
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
                self._fail_all(f"mocker step failed: {exc}")

    async def _step(self) -> None:
        self.holds.expire()
        batch = self.scheduler.schedule()
        if not batch.items:  # the only running sequence preempted itself; admit next step
            await asyncio.sleep(0)
            return
        ms = self.config.step_ms(batch.prefill_tokens, batch.decode_seqs)
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
            self._deliver()  # a step at real pace: its outputs go now

    async def _hand_over(self, first: bool) -> None:
        """At ratio 0, after a step: the event loop's turn once the slice is
        over (`step_slice_ms` and MIN_SLICE_STEPS both done), or at once when
        the step gave an answer its first token, unless the last slice already
        ended that way (under load nearly every step starts an answer)."""
        self._slice_steps += 1
        fewest = MIN_SLICE_STEPS if self.config.step_slice_ms > 0 else 1
        over = self._slice_steps >= fewest and self._clock() >= self._slice_end
        if over or (first and not self._cut_short):
            self._cut_short = not over
            self._deliver()  # pushed readers take the slice's outputs now
            await self._sleep(0)  # readers that pull, new requests
            self._start_slice()

    async def _pace(self, seconds: float) -> None:
        """Wait out a step of `seconds`, begun when the last one's outputs
        were due (or now, after idling or running late)."""
        now = self._clock()
        due = (self._paced_until or now) + seconds
        self._paced_until = max(due, now)
        await self._sleep(max(due - now, 0.0))

    def _deliver(self) -> None:
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

    def _put(self, req: RequestState, item: EngineOutput | Closed) -> None:
        """An output (or a choice's close) into the request's outbox; the
        first since the last delivery makes the request due."""
        if req.outbox.put(item):
            self.due.append(req)

    def _deliver_soon(self) -> None:
        """Outputs put outside the step loop (an abort, a failure) reach pushed
        readers in a turn of their own, not inside whoever caused them."""
        if self.due and not self._delivery_soon:
            self._delivery_soon = True

            def deliver() -> None:
                self._delivery_soon = False
                self._deliver()

            try:
                asyncio.get_running_loop().call_soon(deliver)
            except RuntimeError:  # no loop runs (a stream dropped at exit): nobody reads
                self._delivery_soon = False

    def _start_slice(self) -> None:
        self._slice_end = self._clock() + self.config.step_slice_ms / 1000.0
        self._slice_steps = 0

    def _sample(self, seq: Sequence) -> bool:
        """Append the sequence's next tokens and send them; True when they are
        its first."""
        req = self._requests[seq.request_id]
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
            if req.outbox.put(out):
                self.due.append(req)
            req.unread += len(ids)
            if req.unread >= OUTBOX_WINDOW:
                self.scheduler.held.add(seq.request_id)
        if out.finish is not None or closed:
            self.scheduler.finish(seq)
        if closed:
            self._put(req, Closed(seq.index))
        return first

    def _fail_all(self, message: str) -> None:
        """End every unfinished choice with an error (engine stopped or broken)."""
        for req in list(self._requests.values()):
            for seq in req.seqs:
                if seq.status is not SequenceStatus.FINISHED:
                    self.scheduler.finish(seq)
                    self._put(req, EngineOutput(index=seq.index, finish="error", error=message))
        self._deliver_soon()

    # -- disaggregated serving: the KV handover ------------------------------

    def kv_fetcher(self, fetch: KVFetch) -> None:
        self.fetcher.fetch = fetch

    def kv_release(self, transfer_id: str, hashes: list[int]) -> list[int]:
        return self.holds.release(transfer_id, hashes)

    # -- KV events ---------------------------------------------------------

    def kv_events(self, sink: Callable[[KVEvent], None] | None) -> KVSnapshot:
        """Send the KV cache's events to `sink` from now on (None: to nobody) and
        return what the cache holds now, the state those events apply to."""
        self.scheduler.kv.sink = sink
        return self.scheduler.kv.snapshot()


def _texts(script: MockScript) -> tuple[str, ...]:
    """A script's distinct texts: its one text, or one per choice."""
    return (script.outputs,) if isinstance(script.outputs, str) else script.outputs
