"""MockerEngine: the Engine interface over a simulated step loop.

The engine's contract (lifecycle, generate and the stream's admit, forget,
hold and resume, abort, state, embeddings, LoRA adapters, KV events and the
KV handover's entry points) over the parts that do the work, each given what
it needs when the engine is made:

- `Admission` (admission.py): a request's checks, its script's token ids,
  and its choices' sequences queued in the scheduler;
- `StepLoop` (step_loop.py): one background task that does what a real
  engine's core loop does: schedule a batch, spend the step's simulated time
  (divided by `speedup_ratio`), sample each sequence's next tokens into its
  request's outbox, and hand the outboxes to their streams at delivery points;
- `Holds` and `Fetcher` (handover.py): a prefill's pinned blocks, and a
  decode request's fetch of them before it is admitted.

`generate` only admits sequences and delivers their outputs, so the timing,
batching, prefix reuse and preemption a client sees come from the scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from rotor.engines.adapters import AdapterBook
from rotor.engines.base import KVFetch
from rotor.engines.mocker.admission import Admission
from rotor.engines.mocker.config import MockerConfig
from rotor.engines.mocker.embed import shortened, unit_vector
from rotor.engines.mocker.handover import Fetcher, Holds
from rotor.engines.mocker.scheduler import Scheduler
from rotor.engines.mocker.score import pair_score
from rotor.engines.mocker.step_loop import StepLoop
from rotor.engines.mocker.stream import Closed, MockerStream, RequestState
from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol.engine import KV_TRANSFER, EngineError, EngineRequest, EngineState
from rotor.protocol.kv import KVEvent, KVSnapshot
from rotor.protocol.scores import ScorePair


class MockerEngine:
    """A simulated vLLM-like engine: its contract, over `admission`,
    `step_loop`, `holds` and `fetcher`. Tests reach its time through
    `step_loop.clock`, `step_loop.sleep`, `fetcher.sleep` and `sleep`."""

    def __init__(
        self, card: ModelCard, tokenizer: Tokenizer, config: MockerConfig | None = None
    ) -> None:
        self.config = config = config or MockerConfig()
        caps = dataclasses.replace(
            card.capabilities,
            logprobs=True,
            prompt_logprobs=True,
            mock_scripts=True,
            structural_tags=config.structural_tags,
            kv_block_size=config.block_size,
            embedding_dim=config.embedding_dim,
            generates=config.embedding_dim == 0 and not config.scores_pairs,
            scores_pairs=config.scores_pairs,
            shortens_embeddings=True,
            priority_scheduling=config.scheduling_policy == "priority",
            # a vision-language model's card: the prompt's images are taken,
            # their tokens (already in the prompt) costed and cached as any
            images=card.vision is not None,
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
        # The running requests, by id: admission adds them, the step loop samples
        # them, the engine aborts and forgets them.
        self.requests: dict[str, RequestState] = {}
        self.holds = Holds(self.scheduler.kv, config.kv_hold_timeout_s)
        self.step_loop = StepLoop(
            config, self.scheduler, self.requests, self.holds, self.max_seq_len
        )
        self.fetcher = Fetcher(self.scheduler.kv, config, self.step_loop.running)
        self.admission = Admission(
            self.card, tokenizer, config, self.scheduler, self.requests, self.step_loop.wake
        )
        # LoRA adapters (each changes the seeded output), and which requests use them.
        self.adapter_book = AdapterBook()
        # How embeddings and adapter loads wait out their simulated time (tests record it).
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    # -- lifecycle -------------------------------------------------------

    async def start(self) -> None:
        if not self.step_loop.running():
            self.admission.start()
            self.step_loop.start()

    async def stop(self) -> None:
        self.admission.stop()
        await self.step_loop.stop()
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
        admission = self.admission
        script = admission.parse(request)
        admission.check_admissible(request.request_id)
        rid = request.request_id
        transfer = request.annotations.get(KV_TRANSFER)
        if transfer is not None:
            admission.begin(rid)  # an abort meanwhile applies once admitted
            try:
                await self.fetcher.fetch_blocks(request, transfer)
            except BaseException:
                admission.drop(rid)
                raise
        ids = await admission.script_ids(request, script) if script is not None else None
        aborted = admission.end(rid)  # while it was fetched or tokenized
        req = admission.queue(request, stream, script, ids)
        if aborted is None:
            self.abort(rid)
        for index in sorted(aborted or ()):
            self.abort(rid, index)
        return req

    def adapter_in_use(self, name: str | None) -> contextlib.AbstractContextManager[Any]:
        """The request's adapter (None: the base model) kept while it runs."""
        return self.adapter_book.using(name)

    def forget(self, request_id: str, abort: bool) -> None:
        """Its stream is done: stop what still runs (`abort`), drop the request."""
        if abort:
            self.abort(request_id)
        req = self.requests.pop(request_id, None)
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

    async def score(self, pairs: list[ScorePair]) -> list[float]:
        """A score per pair (engines/mocker/score.py), after the simulated time
        of prefilling them all in one step."""
        if not self.config.scores_pairs:
            raise EngineError(
                f"the model {self.card.name!r} cannot score pairs (start the mocker with "
                "--runner pooling --convert classify)",
                "refused",
                "model",
            )
        ratio = self.config.speedup_ratio
        if ratio > 0:
            tokens = sum(len(p.token_ids) for p in pairs)
            await self.sleep(self.config.step_ms(tokens, 0) / 1000 / ratio)
        return [pair_score(p) for p in pairs]

    # -- LoRA adapters -------------------------------------------------------

    def adapters(self) -> dict[str, str]:
        return self.adapter_book.names()

    async def load_adapter(self, name: str, path: str) -> None:
        """Check the adapter's files, then spend its simulated load time. Its
        requests' seeded output differs from the base model's (and another
        adapter's), the same each time; a `mock` script plays as written."""
        adapter = self.adapter_book.check(name, path)
        ratio = self.config.speedup_ratio
        if ratio > 0 and self.config.lora_load_ms > 0:
            await self.sleep(self.config.lora_load_ms / 1000 / ratio)
        self.adapter_book.add(adapter)

    async def unload_adapter(self, name: str) -> None:
        self.adapter_book.remove(name)

    @property
    def tokens_generated(self) -> int:
        """Tokens sampled since the engine was made (the step loop counts them)."""
        return self.step_loop.tokens_generated

    def abort(self, request_id: str, index: int | None = None) -> None:
        """Stop one choice (or all): its blocks are freed now and the consumer
        sees no further output for it, even output already queued."""
        if self.admission.abort_pending(request_id, index):  # applied once it is admitted
            return
        req = self.requests.get(request_id)
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
            active_requests=len(self.requests) + self.admission.pending,
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
            kv_host_blocks=kv.num_held("host"),
            kv_disk_blocks=kv.num_held("disk"),
            kv_host_blocks_loaded=kv.loaded.get("host", 0),
            kv_disk_blocks_loaded=kv.loaded.get("disk", 0),
        )

    # -- the fault switch (engines/base.Wedge) ---------------------------------

    def wedge(self, seconds: float = 0.0) -> None:
        """Stop stepping for `seconds` of wall time (0: until `unwedge`)."""
        self.step_loop.wedge(seconds)

    def unwedge(self) -> None:
        self.step_loop.unwedge()

    def wedged(self) -> float | None:
        return self.step_loop.wedged()

    # -- disaggregated serving: the KV handover ------------------------------

    def kv_fetcher(self, fetch: KVFetch) -> None:
        self.fetcher.fetch = fetch

    def kv_release(self, transfer_id: str, hashes: list[int]) -> list[int]:
        return self.holds.release(transfer_id, hashes)

    # -- KV events ---------------------------------------------------------

    def kv_events(self, listener: Callable[[KVEvent], None] | None) -> KVSnapshot:
        """Send the KV cache's events to `listener` from now on (None: to nobody) and
        return what the cache holds now, the state those events apply to."""
        self.scheduler.kv.listener = listener
        return self.scheduler.kv.snapshot()
