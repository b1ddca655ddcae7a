"""VLLMEngine: rotor's Engine contract over vLLM's `AsyncLLM`, token ids only.

rotor's frontend renders, tokenizes, detokenizes and stops; vLLM gets the
prompt's token ids (`TokensPrompt`) and streams generated token ids back as
deltas. What vLLM reports maps onto the contract: its finish (`stop` with the
EOS or stop id that ended the choice, `length`, `abort`), its prefix cache's
hit count (`cached_tokens`), its scheduler's running / waiting / KV usage
(`state()`, via a stat logger of rotor's own), and its death
(`EngineDeadError`: an *unavailable* engine error, never a hang). Its KV cache
events come back through `kv_events(listener)`, as the mocker's do. With
`-- --runner pooling` it serves an embedding model instead (`embed`,
pooling.py), or with a one-label classifier a cross-encoder (`score`). With `--lora NAME=DIR` (or `-- --enable-lora`) vLLM serves LoRA
adapters, loaded and unloaded while it runs (the `Adapters` protocol, lora.py).
A vision-language model takes a prompt's images (images.py): vLLM gets the
prompt with one placeholder per image, the decoded images, and their content
hashes as its `multi_modal_uuids`.

The AsyncLLM is created in `start()` (engine processes are spawned there,
40-75 s on a small CPU machine) and shut down in `stop()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from rotor.engines.vllm.args import engine_args
from rotor.engines.vllm.disagg import Mode, Relay
from rotor.engines.vllm.holds import StoredHolds
from rotor.engines.vllm.images import image_prompt
from rotor.engines.vllm.kv_relay import KVRelay, listen, relay_events
from rotor.engines.vllm.lora import VLLMLoras, size_lora
from rotor.engines.vllm.pooling import check_pooling, embed, pooling_of, score
from rotor.engines.vllm.sampling import sampling_params
from rotor.model.card import ModelCard
from rotor.model.lora import read_adapter
from rotor.protocol.engine import (
    EngineError,
    EngineOutput,
    EngineRequest,
    EngineState,
    EngineStream,
    Finish,
    PromptLogprob,
    TokenLogprob,
)
from rotor.protocol.flow import Pump
from rotor.protocol.kv import KVEvent, KVSnapshot
from rotor.protocol.scores import ScorePair

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Scheduler:
    """The last scheduler stats vLLM sent (each engine step sends them), and
    how many records came: each is a batch of the engine core's outputs,
    which only a step makes, so a count that stops moving while requests
    wait is an engine core that stopped stepping (a worker's canary reads
    it as `EngineState.steps`)."""

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    steps: int = 0


def _stat_logger_factory(into: _Scheduler) -> Callable[[Any, int], Any]:
    """A vLLM stat logger factory whose loggers write scheduler stats `into`."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class RotorStats(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            pass

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            into.steps += 1
            if scheduler_stats is not None:
                into.running = scheduler_stats.num_running_reqs
                into.waiting = scheduler_stats.num_waiting_reqs
                into.kv_usage = scheduler_stats.kv_cache_usage

        def log_engine_initialized(self) -> None:
            pass

    return RotorStats


# vLLM's own hold of a NixlConnector prefill's blocks (seconds); rotor's
# --kv-hold-timeout sets it unless the environment already does
NIXL_HOLD_ENV = "VLLM_NIXL_ABORT_REQUEST_TIMEOUT"


class VLLMEngine:
    def __init__(
        self,
        card: ModelCard,
        vllm_words: list[str],
        mode: Mode = "agg",
        kv_hold_timeout_s: float = 30.0,
        loras: list[tuple[str, str]] | None = None,
        priority: bool = False,
    ) -> None:
        """`loras`: the (name, directory) adapters loaded once started; vLLM is
        built with LoRA enabled and sized for them. `priority`: rotor's
        `--scheduling-policy priority`, the same as vLLM's own after `--`."""
        if card.path is None:
            raise ValueError("out=vllm needs a model directory: give --model-path DIR")
        # The card's context length is rotor's --max-model-len (or the model's):
        # vLLM gets exactly that, so both ends check against one number.
        # (the KV event endpoint is set in start(), once rotor's socket is bound)
        self.args = engine_args(
            card.path, card.context_length, vllm_words, "tcp://127.0.0.1:0", mode
        )
        if priority:
            self.args.scheduling_policy = "priority"
        startup = [read_adapter(name, path) for name, path in loras or []]
        size_lora(self.args, vllm_words, startup)
        self.loras = VLLMLoras(bool(self.args.enable_lora), self.args.max_lora_rank)
        # a pooling model (-- --runner pooling) embeds or scores pairs, and does not generate
        self.pooling = pooling_of(self.args)
        pool = self.pooling
        caps = dataclasses.replace(
            card.capabilities,
            structural_tags=pool is None,
            logprobs=pool is None,
            prompt_logprobs=pool is None,
            mock_scripts=False,
            embedding_dim=pool.embedding_dim if pool is not None else 0,
            generates=pool is None,
            shortens_embeddings=pool is not None and pool.matryoshka,
            scores_pairs=pool is not None and pool.scores_pairs,
            priority_scheduling=self.args.scheduling_policy == "priority",
            # a VLM's card says so; once started, vLLM's model config does (start())
            images=pool is None and card.vision is not None,
            images_at_decode=True,  # vLLM expands placeholders itself, a decode's too
        )
        self.card = dataclasses.replace(card, capabilities=caps)
        # a prefill / decode worker's KV connector (docs/vllm.md#disaggregated-serving)
        self.disagg = Relay(self.args.kv_transfer_config)
        self.mode = mode
        self.kv_hold_timeout_s = kv_hold_timeout_s
        # a prefill worker's hand-overs in the storage directory, until loaded
        self.holds = (
            StoredHolds(self.disagg.storage_path, kv_hold_timeout_s)
            if mode == "prefill" and self.disagg.storage_path is not None
            else None
        )
        self.kv_blocks_fetched = 0
        self.kv_fetch_failures = 0
        self.llm: Any = None
        self.relay = KVRelay(self.args.block_size or 0, self.loras.name_of)
        self._sched = _Scheduler()
        self._relay_task: asyncio.Task[None] | None = None
        self._running: set[str] = set()
        self._aborts: set[asyncio.Task[None]] = set()
        self._hold_timer: asyncio.TimerHandle | None = None
        self._kv_blocks_total = 0
        self.tokens_generated = 0
        self._eos = set(card.eos_token_ids)

    # -- lifecycle -------------------------------------------------------

    async def start(self) -> None:
        if self.llm is not None:
            return
        from vllm.v1.engine.async_llm import AsyncLLM

        if self.mode == "prefill" and self.disagg.connector == "NixlConnector":
            # (vLLM reads it as its engine processes start; 0 is "until fetched")
            hold = self.kv_hold_timeout_s or 10**9
            os.environ.setdefault(NIXL_HOLD_ENV, str(max(1, round(hold))))
        sock, self.args.kv_events_config.endpoint = listen()
        try:
            self.llm = AsyncLLM.from_engine_args(
                self.args, stat_loggers=[_stat_logger_factory(self._sched)]
            )
        except BaseException:
            sock.close(linger=0)
            raise
        if self.pooling is not None:
            try:
                await check_pooling(self.llm, self.pooling)
            except BaseException:
                sock.close(linger=0)
                await self.stop()
                raise
        self.loras.llm = self.llm
        cache = self.llm.vllm_config.cache_config
        self.relay.block_size = cache.block_size
        # The card says at which block size its KV events name blocks (the kv router
        # hashes so), and whether vLLM serves the model's images.
        caps = dataclasses.replace(
            self.card.capabilities,
            kv_block_size=cache.block_size,
            images=self.pooling is None and self.llm.model_config.is_multimodal_model,
        )
        self.card = dataclasses.replace(self.card, capabilities=caps)
        self._kv_blocks_total = cache.num_gpu_blocks or 0
        self._relay_task = asyncio.create_task(relay_events(sock, self.relay), name="vllm-kv")

    async def stop(self) -> None:
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        task, self._relay_task = self._relay_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.loras.close()
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.shutdown()

    # -- Engine interface --------------------------------------------------

    def generate(self, request: EngineRequest) -> EngineStream:
        """vLLM's deltas as EngineOutputs until every choice finished (a
        generator pumped into a source); stopping it aborts the request in
        vLLM at once."""
        return Pump(self._generate(request))

    async def _generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        from vllm.exceptions import VLLMClientError
        from vllm.inputs import TokensPrompt
        from vllm.v1.engine.exceptions import EngineDeadError

        llm = self.llm
        if llm is None:
            raise EngineError("the vLLM engine is not started", "unavailable")
        if llm.errored:
            raise EngineError("the vLLM engine is dead", "unavailable")
        rid = request.request_id
        if rid in self._running:
            raise EngineError(f"request_id {rid!r} is already running", "internal")
        if not request.token_ids:
            raise EngineError("token_ids: the prompt is empty", "refused", "prompt")
        if request.images and not self.card.capabilities.images:
            raise EngineError(
                f"messages: the model {self.card.name!r} takes text only in vLLM, "
                f"and the prompt has {len(request.images)} image(s)",
                "refused",
                "messages",
            )
        # (images decoded before a KV hand-over is set up: a bad one is refused first)
        prompt = (
            TokensPrompt(**await image_prompt(request))
            if request.images
            else TokensPrompt(prompt_token_ids=list(request.token_ids))
        )
        handover = self.disagg.request(request)
        if handover.failed is not None:
            self.kv_fetch_failures += 1
            if handover.enforced:
                raise EngineError(
                    f"the KV hand-over failed: {handover.failed}",
                    "unavailable",
                    cause="kv_transfer",
                )
            logger.warning("request %s: %s; computing the prompt here", rid, handover.failed)
        params = sampling_params(request, handover.params)
        want_logprobs = request.output.logprobs
        top = request.output.top_logprobs
        prompt_top = request.output.prompt_logprobs  # (its first output carries them)
        # its adapter (if any) stays in vLLM until it ends
        with self.loras.using(request.lora) as lora:
            self._running.add(rid)
            if request.cache_salt is not None:  # vLLM salts its first block's hash
                prompt["cache_salt"] = request.cache_salt
            stream = llm.generate(prompt, params, rid, lora_request=lora, priority=request.priority)
            scored = None  # the prompt's logprobs, till an output takes them
            first: set[int] = set()
            try:
                async for out in stream:
                    if prompt_top is not None and out.prompt_logprobs:  # (once; then [])
                        scored = _prompt_logprobs(
                            request.token_ids, out.prompt_logprobs, prompt_top
                        )
                        prompt_top = None
                    for c in out.outputs:
                        if c.finish_reason == "abort":
                            continue  # aborted: the stream ends with no further output
                        ids = list(c.token_ids)
                        self.tokens_generated += len(ids)
                        item = EngineOutput(index=c.index, token_ids=ids)
                        if c.index not in first:
                            first.add(c.index)
                            item.cached_tokens = out.num_cached_tokens or 0
                        if want_logprobs and c.logprobs is not None:
                            item.logprobs = _logprobs(ids, c.logprobs, top)
                        if c.finish_reason is not None:
                            item.finish, item.matched = self._finish(
                                c.finish_reason, c.stop_reason, ids
                            )
                            if handover.prefill:
                                item.kv_transfer = self.disagg.handed_over(out.kv_transfer_params)
                                self._hold(item.kv_transfer)
                            elif handover.fetch_tokens > 0:
                                loaded = self.disagg.loaded(handover, out.kv_transfer_params)
                                self.kv_blocks_fetched += loaded // self.relay.block_size
                        if scored is not None and (ids or item.finish is not None):
                            item.prompt_logprobs, scored = scored, None
                        if ids or item.finish is not None:
                            yield item
            except EngineDeadError as e:
                raise EngineError(f"the vLLM engine died: {e}", "unavailable") from None
            except VLLMClientError as e:
                raise EngineError(str(e), "refused", _param(str(e))) from None
            except ValueError as e:  # vLLM's validation of the request
                raise EngineError(str(e), "refused", _param(str(e))) from None
            finally:
                self._running.discard(rid)
                await stream.aclose()  # leaving early: vLLM aborts the request here

    async def embed(self, inputs: list[list[int]], dimensions: int | None) -> list[list[float]]:
        """Each input's vector from vLLM's pooler, in order (pooling.py)."""
        if self.pooling is None or self.pooling.scores_pairs:
            what = "generation (start it with -- --runner pooling)"
            raise EngineError(
                f"the model {self.card.name!r} cannot embed: vLLM runs it for "
                + ("scoring pairs" if self.pooling is not None else what),
                "refused",
                "model",
            )
        return await embed(self.llm, inputs, dimensions, self._running)

    async def score(self, pairs: list[ScorePair]) -> list[float]:
        """Each pair's score from vLLM's classifier, in order (pooling.py)."""
        if self.pooling is None or not self.pooling.scores_pairs:
            raise EngineError(
                f"the model {self.card.name!r} cannot score pairs: vLLM runs it for "
                + ("generation" if self.pooling is None else "embeddings"),
                "refused",
                "model",
            )
        return await score(self.llm, pairs, self._running)

    def abort(self, request_id: str) -> None:
        """Free the request's slot in vLLM now (its stream then ends)."""
        if self.llm is None or request_id not in self._running:
            return
        task = asyncio.get_running_loop().create_task(self.llm.abort(request_id))
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    # -- LoRA adapters (the Adapters protocol, lora.py) -------------------------

    def adapters(self) -> dict[str, str]:
        return self.loras.names()

    async def load_adapter(self, name: str, path: str) -> None:
        """Load it into vLLM now, so a bad adapter fails here, not at its first request."""
        await self.loras.load(name, path)

    async def unload_adapter(self, name: str) -> None:
        self.loras.unload(name)

    # -- a prefill's hand-overs (the KVHold protocol) -------------------------

    def _hold(self, transfer: dict[str, Any]) -> None:
        """Keep a prefill's stored KV for its decode worker, for at most the hold timeout."""
        key = transfer.get("transfer_id")
        if self.holds is None or not key:
            return
        tokens = int((transfer.get("params") or {}).get("stored_tokens") or 0)
        self.holds.hold(str(key), tokens // (self.relay.block_size or 1))
        if self.kv_hold_timeout_s > 0 and self._hold_timer is None:
            self._expire_holds_in(self.kv_hold_timeout_s)

    def _expire_holds_in(self, delay: float) -> None:
        """One timer for all hand-overs, armed again for the next deadline."""
        self._hold_timer = asyncio.get_running_loop().call_later(delay, self._expire_holds)

    def _expire_holds(self) -> None:
        self._hold_timer = None
        wait = self.holds.expire() if self.holds is not None else None
        if wait is not None:
            self._expire_holds_in(max(wait, 0.001))

    def kv_release(self, transfer_id: str, hashes: list[int]) -> list[int]:
        """The frontend drops a hand-over nobody will load: deleted now. (A
        decode worker loads it through vLLM's connector, never through here:
        no hashes are handed over this way.)"""
        if self.holds is not None:
            self.holds.release(transfer_id)
        return []

    def state(self) -> EngineState:
        total = self._kv_blocks_total
        used = round(total * self._sched.kv_usage)
        return EngineState(
            active_requests=len(self._running),
            waiting=self._sched.waiting,
            running=self._sched.running,
            tokens_generated=self.tokens_generated,
            steps=self._sched.steps,
            kv_blocks_total=total,
            kv_blocks_free=total - used,
            kv_blocks_cached=self.relay.num_cached,
            kv_host_blocks=self.relay.num_held("host"),
            kv_disk_blocks=self.relay.num_held("disk"),
            kv_blocks_fetched=self.kv_blocks_fetched,
            kv_fetch_failures=self.kv_fetch_failures,
            kv_blocks_pinned=self.holds.pinned() if self.holds is not None else 0,
            kv_hold_timeouts=self.holds.timeouts if self.holds is not None else 0,
        )

    # -- KV events ---------------------------------------------------------

    def kv_events(self, listener: Callable[[KVEvent], None] | None) -> KVSnapshot:
        """Send the relayed KV events to `listener` from now on (None: to nobody) and
        return what vLLM's cache holds now, the state those events apply to."""
        self.relay.listener = listener
        return self.relay.snapshot()

    # -- mapping -------------------------------------------------------------

    def _finish(
        self, reason: str, stop_reason: int | str | None, ids: list[int]
    ) -> tuple[Finish, int | str | None]:
        """vLLM's finish as the contract's: a stop at an EOS id is `eos`, at a
        user's stop id `stop`, with the id that matched."""
        if reason == "length":
            return "length", None
        if reason == "stop":
            matched = stop_reason if stop_reason is not None else (ids[-1] if ids else None)
            if stop_reason is None or matched in self._eos:
                return "eos", matched  # vLLM's own EOS check reports no reason
            return "stop", matched
        return "error", None


def _best(entry: Any, top: int) -> list[tuple[int, float]]:
    """The `top` likeliest of one position's {id: Logprob} map, by vLLM's rank."""
    ranked = sorted(
        ((tid, lp) for tid, lp in entry.items() if lp.rank is not None and lp.rank <= top),
        key=lambda pair: pair[1].rank,
    )
    return [(tid, lp.logprob) for tid, lp in ranked[:top]]


def _logprobs(ids: list[int], entries: Any, top: int) -> list[TokenLogprob]:
    """vLLM's per-token {id: Logprob} maps as TokenLogprobs with the `top` best."""
    result: list[TokenLogprob] = []
    for token_id, entry in zip(ids, entries, strict=False):
        chosen = entry.get(token_id)
        result.append(
            TokenLogprob(
                token_id,
                chosen.logprob if chosen is not None else float("-inf"),
                _best(entry, top),
            )
        )
    return result


def _prompt_logprobs(ids: list[int], entries: Any, top: int) -> list[PromptLogprob]:
    """vLLM's prompt logprobs ({id: Logprob} per prompt token, None for the
    first) as PromptLogprobs: each token's own logprob and rank, and the
    `top` best by rank."""
    result: list[PromptLogprob] = []
    for token_id, entry in zip(ids[1:], list(entries)[1:], strict=False):
        if entry is None:
            continue
        chosen = entry.get(token_id)
        result.append(
            PromptLogprob(
                token_id,
                chosen.logprob if chosen is not None else float("-inf"),
                chosen.rank if chosen is not None and chosen.rank is not None else 0,
                _best(entry, top),
            )
        )
    return result


def _param(message: str) -> str | None:
    """The request field a vLLM validation message is about, when it names one."""
    names = ("max_tokens", "prompt_logprobs", "logprobs", "structured_outputs", "seed")
    for name in (*names, "temperature", "top_p"):
        if name in message:
            return "guided_json" if name == "structured_outputs" else name
    return None
