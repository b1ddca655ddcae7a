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
from rotor.engines.mocker.sequence import Sequence, TokenSource
from rotor.engines.mocker.step_loop import StepLoop
from rotor.engines.mocker.stream import Closed, MockerStream, RequestState
from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    RESUME_FROM,
    EngineError,
    EngineRequest,
    EngineState,
)
from rotor.protocol.kv import KVEvent, KVSnapshot, lora_root
from rotor.protocol.mock import MockScript

logger = logging.getLogger(__name__)

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
        self._requests: dict[str, RequestState] = {}
        self.holds = Holds(self.scheduler.kv, config.kv_hold_timeout_s)
        self.step_loop = StepLoop(
            config, self.scheduler, self._requests, self.holds, self.max_seq_len
        )
        self.fetcher = Fetcher(self.scheduler.kv, config, self.step_loop.running)
        self._adapters = AdapterBook()  # LoRA adapters: each changes the seeded output
        # Requests whose long script is being tokenized off the loop, and the
        # choices aborted meanwhile (None: all of them), applied once admitted.
        self._tokenizing: dict[str, set[int] | None] = {}
        self._script_pool: ThreadPoolExecutor | None = None
        # How embeddings and adapter loads wait out their simulated time (tests record it).
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    # -- lifecycle -------------------------------------------------------

    async def start(self) -> None:
        if not self.step_loop.running():
            self._script_pool = ThreadPoolExecutor(
                SCRIPT_WORKERS, thread_name_prefix="rotor-mocker-script"
            )
            self.step_loop.start()

    async def stop(self) -> None:
        pool, self._script_pool = self._script_pool, None
        await self.step_loop.stop()
        if pool is not None:
            pool.shutdown(wait=False)  # a script still tokenizing is refused once done
        self.fetcher.stop()  # its request is refused
        self.step_loop.fail_all("engine stopped")

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
            self.step_loop.wake()

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
            await self.sleep(self.config.step_ms(tokens, 0) / 1000 / ratio)
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
            await self.sleep(self.config.lora_load_ms / 1000 / ratio)
        self._adapters.add(adapter)

    async def unload_adapter(self, name: str) -> None:
        self._adapters.remove(name)

    @property
    def tokens_generated(self) -> int:
        """Tokens sampled since the engine was made (the step loop counts them)."""
        return self.step_loop.tokens_generated

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
            self.step_loop.put(req, Closed(seq.index))
        self.step_loop.deliver_soon()

    def state(self) -> EngineState:
        kv = self.scheduler.kv
        self.holds.expire()
        return EngineState(
            active_requests=len(self._requests) + len(self._tokenizing),
            waiting=len(self.scheduler.waiting),
            running=len(self.scheduler.running),
            tokens_generated=self.step_loop.tokens_generated,
            kv_blocks_total=kv.num_total,
            kv_blocks_free=kv.num_free,
            kv_blocks_cached=kv.num_cached,
            pending_prefill_tokens=self.scheduler.pending_prefill_tokens(),
            preemptions=self.scheduler.preemptions,
            steps=self.step_loop.steps,
            simulated_ms=self.step_loop.simulated_ms,
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
        if not self.step_loop.running():
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
        self.step_loop.wake()
        return req

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
