"""The workers of one model, and the engine client that routes over them.

`Pool.generate` is the Engine contract over remote workers: choose a worker
(the router mode), stream its outputs, and when the worker becomes
unavailable mid-stream (killed, partitioned, lease gone, silent) resend the
request to another one (router/migration.py), up to `migration_limit` times,
so the consumer sees one uninterrupted stream.

When the model has prefill workers (`Lease.role`), a request is routed in
two stages: its decode worker first (the pool's router, over the agg and
decode workers), then — when the disaggregation policy says so
(router/disagg.py) — a prefill worker (`prefill_router`, over the prefill
workers), which computes the prompt and answers with the first token and
where its KV blocks are; the decode worker fetches them and goes on. A
prefill that cannot happen (no prefill worker, a refusal, a failure, a
death) is done by the decode worker itself, counted, unless the policy
enforces disaggregation (then it is a 503).

The pool reaches its workers through a `WorkerLink` (the NATS request plane
fills it), and tells whoever built it when a worker joins (`on_join`).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any, Protocol

from rotor import tracing
from rotor.model.card import ModelCard
from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    RESUME_FROM,
    Delivery,
    EngineError,
    EngineOutput,
    EngineRequest,
    EngineState,
    is_pushed,
)
from rotor.protocol.lease import Lease
from rotor.protocol.routing import Routed
from rotor.router import migration
from rotor.router.disagg import Choice, DisaggPolicy
from rotor.router.kv import KVRouter, KVStats
from rotor.router.modes import Decision, LocalLoad, Router, WorkerState
from rotor.router.sessions import Sessions
from rotor.router.stats import PoolStats
from rotor.tracing import NO_SPAN, Span

log = logging.getLogger("rotor.router")

_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(EngineState))
DEFAULT_REQUEST_TIMEOUT_S = 30.0
DECODE_ROLES = ("agg", "decode")


class WorkerLink(Protocol):
    """What a pool needs of the request plane."""

    def generate(
        self,
        worker_id: str,
        request: EngineRequest,
        request_timeout: float,
        headers: dict[str, str] | None = None,
    ) -> AsyncIterator[EngineOutput]:
        """`request` on one worker; closing the stream early aborts it there.
        `headers` go with it (the trace context of its attempt, tracing on)."""
        ...

    async def embed(
        self,
        worker_id: str,
        inputs: list[list[int]],
        dimensions: int | None,
        width: int,
        timeout: float,
    ) -> list[list[float]]:
        """The inputs' vectors (`width` numbers each) from one worker;
        EngineError when it cannot give them."""
        ...

    def worker_gone(self, worker_id: str) -> None:
        """The worker left: its running streams end now (and may migrate)."""
        ...

    def release_kv(self, worker_id: str, transfer_id: str) -> None:
        """A prefill's pinned KV blocks are not wanted after all: free them now."""
        ...


@dataclasses.dataclass
class _Handover:
    """A remote prefill's answer: its first output, where the blocks are."""

    first: EngineOutput
    worker: str
    transfer: dict[str, Any]
    at: float  # when the answer came (monotonic)


class Pool:
    def __init__(
        self,
        card: ModelCard,
        link: WorkerLink,
        router: Router,
        migration_limit: int = 3,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
        on_join: Callable[[str], None] | None = None,
        prefill_router: Router | None = None,
        disagg: DisaggPolicy | None = None,
        sessions: Sessions | None = None,
    ) -> None:
        """`router` picks among the agg and decode workers, `prefill_router`
        (by default one like `router`'s mode is not shared: give one) among
        the prefill workers."""
        self.card = card
        self.link = link
        self.router = router
        self.prefill_router = prefill_router
        self.disagg = disagg or DisaggPolicy()
        self.sessions = sessions  # None: session ids are not followed
        self.migration_limit = migration_limit
        self.request_timeout = request_timeout
        self.on_join = on_join
        self.workers: dict[str, Lease] = {}
        self.load = LocalLoad()
        self.stats = PoolStats()
        self._routed: dict[str, Routed] = {}
        # The LoRA adapters of its model: those live workers hold, and those
        # of workers that left (their requests are 503s until a holder comes,
        # like a model's whose last worker left); an unload forgets one.
        self._adapters: dict[str, str] = {}

    @property
    def kv(self) -> KVRouter | None:
        return self.router if isinstance(self.router, KVRouter) else None

    def kv_router_of(self, worker_id: str) -> KVRouter | None:
        """The kv router whose index follows this worker's KV events (the
        prefill router's for a prefill worker)."""
        lease = self.workers.get(worker_id)
        router = (
            self.prefill_router if lease is not None and lease.role == "prefill" else self.router
        )
        return router if isinstance(router, KVRouter) else None

    # -- membership ------------------------------------------------------------------

    def upsert(self, lease: Lease) -> None:
        old = self.workers.get(lease.worker_id)
        new = old is None
        self.workers[lease.worker_id] = lease
        self._adapters.update(lease.loras)
        for name in old.loras.keys() - lease.loras.keys() if old is not None else ():
            if not any(name in w.loras for w in self.workers.values()):  # unloaded everywhere
                self._adapters.pop(name, None)
        if new and self.on_join is not None:
            self.on_join(lease.worker_id)

    def remove(self, worker_id: str) -> None:
        self.workers.pop(worker_id, None)
        self.link.worker_gone(worker_id)
        for router in (self.router, self.prefill_router):
            if isinstance(router, WorkerState):
                router.remove_worker(worker_id)

    def live(self, roles: tuple[str, ...] | None = None, lora: str | None = None) -> list[Lease]:
        """The workers taking requests (of those roles; holding that adapter)."""
        return [
            w
            for w in self.workers.values()
            if w.status == "serving"
            and (roles is None or w.role in roles)
            and (lora is None or lora in w.loras)
        ]

    def adapters(self) -> dict[str, str]:
        """The model's LoRA adapters (name → directory), each served as a model."""
        return self._adapters

    def describe(self) -> list[dict[str, Any]]:
        """The live workers, for /health."""
        out = []
        for w in sorted(self.live(), key=lambda w: w.worker_id):
            info = {
                "id": w.worker_id,
                "address": w.address,
                "role": w.role,
                "active_requests": w.state.active_requests,
                "in_flight_here": self.load.in_flight[w.worker_id],
                "kv_blocks_used": w.state.kv_blocks_total - w.state.kv_blocks_free,
            }
            kv = self.kv_router_of(w.worker_id)
            if kv is not None and kv.index is not None:  # what this frontend's index holds
                info["kv_blocks_indexed"] = kv.index.num_blocks(w.worker_id)
            out.append(info)
        return out

    def pools(self) -> dict[str, list[str]]:
        """The live workers by what they do: the decode pool (agg and decode
        workers) and the prefill pool."""
        return {
            "decode": sorted(w.worker_id for w in self.live(DECODE_ROLES)),
            "prefill": sorted(w.worker_id for w in self.live(("prefill",))),
        }

    def kv_stats(self) -> KVStats | None:
        kv = self.kv
        return kv.stats if kv is not None else None

    # -- the engine contract ------------------------------------------------------------

    def state(self) -> EngineState:
        total = EngineState()
        for w in self.live():
            for name in _STATE_FIELDS:
                setattr(total, name, getattr(total, name) + getattr(w.state, name))
        return total

    def routed(self, request_id: str) -> Routed | None:
        """Where a running request went (until its consumer's turn after its end)."""
        return self._routed.get(request_id)

    def generate(self, request: EngineRequest) -> PoolStream:
        """The request's outputs from its worker, moved to another one when
        that one fails (up to the migration limit): read, or pushed (`PoolStream`)."""
        attempt = _Attempt()
        return PoolStream(self._generate(request, attempt), attempt)

    async def _generate(self, request: EngineRequest, now: _Attempt) -> AsyncIterator[EngineOutput]:
        """The attempts, one after another; `now` says, at each output it
        yields, whether the attempt's own stream may push the rest."""
        rid = request.request_id
        progress = migration.Progress()
        tried: set[str] = set()
        attempt = request
        migrations = 0
        handover: _Handover | None = None  # until its decode worker has fetched
        # The prefill's first token, held back until its decode worker's first
        # output: the handover is part of the time to the first token, never a
        # gap between two tokens (as in vLLM's and Dynamo's proxies)
        held: EngineOutput | None = None
        moved: str | None = None  # why the last attempt failed: the next one is a migration
        routed: Routed | None = None
        try:
            while True:
                route = tracing.start("rotor.route", {"rotor.engine_request_id": rid})
                decision = self._choose(attempt, tried, route)
                if routed is None:
                    routed = self._routed[rid] = Routed(decision.headers)
                elif moved is not None:
                    routed.migrations.append((moved, decision.worker_id))
                worker = decision.worker_id
                if migrations == 0 and progress.tokens == 0:
                    handover = await self._remote_prefill(request, decision, route)
                    if handover is not None:
                        progress.add(handover.first)
                        if _ends_the_answer(request, handover.first):
                            yield handover.first  # the consumer ends it; nobody fetches
                        else:
                            held = handover.first
                        attempt = self._decode_request(request, progress, handover)
                route.end()
                prefill = self._sent(worker, attempt, decision)
                span = _attempt_span(worker, attempt, migrations, moved, handover is not None)
                sent = progress.tokens
                stream = self.link.generate(worker, attempt, self.request_timeout, span.headers())
                now.stream, now.progress = stream, progress
                try:
                    async for out in stream:
                        if prefill:
                            self._prefilled(worker, prefill)
                            prefill = 0
                        if handover is not None:  # the blocks moved: the handover is over
                            self.stats.handover.observe(time.monotonic() - handover.at)
                            handover = None
                        if held is not None:
                            first, held = held, None
                            yield first
                        progress.add(out)
                        now.steady = True  # nothing left to do per output but count it
                        yield out
                        now.steady = False
                    if held is not None:  # (a decode stream that said nothing)
                        yield held
                    return
                except EngineError as e:
                    span.fail(e.message, e.cause)
                    moved = e.cause or "unavailable"
                    if handover is not None:  # its decode worker failed: nobody will fetch
                        self.link.release_kv(handover.worker, _transfer_id(handover))
                        handover = None
                    refused = migration.refusal(
                        e, migrations, self.migration_limit, request, self.card
                    )
                    if refused is not None:
                        raise refused from None
                    tried.add(worker)
                    migrations += 1
                    self.stats.migrations[e.cause or "unavailable"] += 1
                    log.warning(
                        "request %s: %s; migrating (%d/%d) with %d tokens so far",
                        rid,
                        e.message,
                        migrations,
                        self.migration_limit,
                        progress.tokens,
                    )
                    attempt = migration.resumed(request, progress, f"{rid}-m{migrations}")
                finally:
                    span.set({"gen_ai.usage.output_tokens": progress.tokens - sent})
                    span.end()
                    await stream.aclose()  # type: ignore[attr-defined]  # aborts it if it runs
                    self._done(worker, prefill)
        finally:
            # forgotten once the caller's turn is over: an answer that ends at
            # its first output closes this stream before the caller, taking
            # that output, reads where it went (`routed`)
            asyncio.get_running_loop().call_soon(self._routed.pop, rid, None)
            if handover is not None:  # ended before its decode worker fetched: free them now
                self.link.release_kv(handover.worker, _transfer_id(handover))

    async def embed(self, inputs: list[list[int]], dimensions: int | None) -> list[list[float]]:
        """The inputs' vectors from one live worker, the router's pick; when it
        is unavailable, from another, up to the migration limit."""
        request = EngineRequest(f"embed-{uuid.uuid4().hex[:12]}", self.card.name, inputs[0])
        tried: set[str] = set()
        while True:
            decision = self._choose(request, tried)
            worker = decision.worker_id
            prefill = self._sent(worker, request, decision)
            try:
                width = dimensions or self.card.capabilities.embedding_dim
                return await self.link.embed(
                    worker, inputs, dimensions, width, self.request_timeout
                )
            except EngineError as e:
                if e.kind != "unavailable" or len(tried) >= self.migration_limit:
                    raise
                tried.add(worker)
                self.stats.migrations[e.cause or "unavailable"] += 1
                log.warning("embed request %s: %s; trying another worker", request.request_id, e)
            finally:
                self._done(worker, prefill)

    # -- disaggregation ------------------------------------------------------------------

    async def _remote_prefill(
        self, request: EngineRequest, decision: Decision, route: Span
    ) -> _Handover | None:
        """The prompt prefilled on a prefill worker, when the policy says so
        and one can; None: the decode worker prefills it. The disaggregation
        decision ends the `route` span."""
        prefill_workers = self.live(("prefill",), request.lora)
        if not prefill_workers and not self.disagg.enforce and not self.live(("decode",)):
            return None  # an aggregated model: no decision to count
        prompt = len(request.token_ids)
        cached = prompt - decision.prefill_tokens if decision.prefill_tokens is not None else 0
        queues = [
            (w.state.pending_prefill_tokens + self.load.prefilling[w.worker_id],
             w.state.max_batched_tokens)
            for w in prefill_workers
        ]  # fmt: skip
        choice = self.disagg.decide(prompt, cached, queues)
        route.set({"rotor.disagg.where": choice.where, "rotor.disagg.reason": choice.reason})
        route.end()
        if choice.where == "local" and self.disagg.enforce:
            raise self._unavailable(request, "no live prefill worker serves the model")
        handover = None
        if choice.where == "remote":
            handover = await self._prefill_on(prefill_workers, request, decision)
            if handover is None:
                choice = Choice("local", "prefill_failed")
                decision.headers["x-rotor-worker"] = decision.worker_id
        self.stats.disagg[(choice.where, choice.reason)] += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "request %s: prefill %s (%s): %d prompt tokens, %d cached on %s, %d prefill "
                "worker(s) queued %s",
                request.request_id,
                choice.where,
                choice.reason,
                prompt,
                cached,
                decision.worker_id,
                len(queues),
                [q for q, _ in queues],
            )
        return handover

    async def _prefill_on(
        self, workers: list[Lease], request: EngineRequest, decision: Decision
    ) -> _Handover | None:
        """Run the prefill on one of `workers`; None when it did not work
        out (a 503 instead when disaggregation is enforced)."""
        router = self.prefill_router or self.router
        job = replace(
            request,
            request_id=f"{request.request_id}-p",
            stop=replace(request.stop, max_tokens=1, min_tokens=min(request.stop.min_tokens, 1)),
            annotations={**request.annotations, PREFILL_ONLY: True},
        )
        chosen = router.choose(workers, job, self.load)
        worker = chosen.worker_id
        self.stats.decisions[worker] += 1
        decision.headers["x-rotor-worker"] = f"prefill={worker}, decode={decision.worker_id}"
        tokens = self._sent(worker, job, chosen)
        first: EngineOutput | None = None
        span = _attempt_span(worker, job, 0, None, False)
        stream = self.link.generate(worker, job, self.request_timeout, span.headers())
        try:
            async for out in stream:
                if out.kv_transfer is not None:
                    first = out
        except EngineError as e:
            span.fail(e.message, e.cause)
            if self.disagg.enforce:
                raise self._unavailable(
                    request, f"the prefill on worker {worker} failed: {e.message}"
                ) from None
            log.warning("request %s: prefill on %s failed (%s); prefilling locally",
                        request.request_id, worker, e.message)  # fmt: skip
            return None
        else:
            if first is None:
                span.fail(f"worker {worker} handed over no KV blocks")
        finally:
            span.end()
            await stream.aclose()  # type: ignore[attr-defined]
            self._done(worker, tokens)
        if first is None or first.kv_transfer is None:
            if self.disagg.enforce:
                raise self._unavailable(request, f"worker {worker} handed over no KV blocks")
            log.warning("request %s: worker %s handed over no KV blocks; prefilling locally",
                        request.request_id, worker)  # fmt: skip
            return None
        transfer = first.kv_transfer
        answer = EngineOutput(
            index=first.index,
            token_ids=first.token_ids,
            logprobs=first.logprobs,
            cached_tokens=first.cached_tokens,
        )
        return _Handover(answer, worker, transfer, time.monotonic())

    def _decode_request(
        self, request: EngineRequest, progress: migration.Progress, handover: _Handover
    ) -> EngineRequest:
        """The request as its decode worker continues it: the first token is
        part of its prompt, and it fetches the prompt's blocks."""
        transfer = {**handover.transfer, "worker": handover.worker}
        if self.disagg.enforce:
            transfer["enforce"] = True
        return migration.resumed(
            request, progress, f"{request.request_id}-d", {KV_TRANSFER: transfer}
        )

    def _unavailable(self, request: EngineRequest, why: str) -> EngineError:
        self.stats.disagg[("refused", "enforced")] += 1
        return EngineError(
            f"{why}; --enforce-disagg keeps {self.card.name!r} from prefilling on its decode "
            f"workers",
            "unavailable",
            cause="no_worker",
        )

    # -- the frontend's own view of each worker's load ----------------------------------

    def _sent(self, worker: str, request: EngineRequest, decision: Decision) -> int:
        """Count a request sent to `worker`; the prompt tokens it must compute."""
        load = self.load
        load.in_flight[worker] += 1
        prefill = decision.prefill_tokens
        prefill = len(request.token_ids) if prefill is None else prefill
        load.prefilling[worker] += prefill
        return prefill

    def _prefilled(self, worker: str, tokens: int) -> None:
        prefilling = self.load.prefilling
        prefilling[worker] -= tokens
        if prefilling[worker] <= 0:
            del prefilling[worker]

    def _done(self, worker: str, prefill: int) -> None:
        self._prefilled(worker, prefill)
        in_flight = self.load.in_flight
        in_flight[worker] -= 1
        if in_flight[worker] <= 0:
            del in_flight[worker]

    def _choose(self, request: EngineRequest, tried: set[str], route: Span = NO_SPAN) -> Decision:
        """A decode (or agg) worker for `request`, none of `tried` if it can; the
        decision told to `route` (a span that a request with no worker ends)."""
        live = self.live(DECODE_ROLES, request.lora)
        candidates = [w for w in live if w.worker_id not in tried] or live
        if not candidates:
            self.stats.no_worker += 1
            what = f"the model {self.card.name!r}"
            if request.lora is not None:
                what = f"the LoRA adapter {request.lora!r} of {what}"
            error = EngineError(f"no live worker serves {what}", "unavailable", cause="no_worker")
            route.fail(error.message, error.cause)
            route.end()
            raise error
        sessions, session = self.sessions, request.session_id
        if sessions is not None and session is not None and not tried:  # (not a migration)
            keep, outcome = sessions.choose(session, candidates)
            self.stats.sessions[outcome] += 1
            if keep is not None:
                candidates = [keep]  # the router still tells its cost (kv: the overlap)
        decision = self.router.choose(candidates, request, self.load)
        if sessions is not None and session is not None:
            sessions.pin(session, decision.worker_id)  # a migration's new worker, too
        self.stats.decisions[decision.worker_id] += 1
        decision.headers.setdefault("x-rotor-worker", decision.worker_id)
        if route.recording:
            route.set(_decision_attributes(self.router, candidates, request, decision))
        return decision


def _ends_the_answer(request: EngineRequest, first: EngineOutput) -> bool:
    """Whether the prefill's first token surely ends the answer (its last
    token allowed, or a stop token): then it is not held for a decode."""
    stop = request.stop
    if stop.max_tokens <= len(first.token_ids):
        return True
    ids = {*stop.stop_token_ids, *stop.visible_stop_token_ids}
    if not stop.ignore_eos:
        ids.update(stop.eos_token_ids)
    return stop.min_tokens <= len(first.token_ids) and not ids.isdisjoint(first.token_ids)


def _attempt_span(
    worker: str, request: EngineRequest, attempt: int, moved: str | None, decode: bool
) -> Span:
    """The span of one request sent to one worker (its generate span is the
    worker's child of it): a migration's says why (`moved`)."""
    if not tracing.enabled():
        return NO_SPAN
    stage = "prefill" if PREFILL_ONLY in request.annotations else "decode" if decode else "agg"
    return tracing.start(
        "rotor.attempt",
        {
            "rotor.worker_id": worker,
            "rotor.engine_request_id": request.request_id,
            "rotor.stage": stage,
            "rotor.attempt": attempt,
            "rotor.migration.cause": moved,
            "rotor.resume_from": request.annotations.get(RESUME_FROM),
        },
        kind="client",
    )


def _decision_attributes(
    router: Router, candidates: list[Lease], request: EngineRequest, decision: Decision
) -> dict[str, Any]:
    """What a routing decision span says: the mode, the candidates, the
    worker chosen, and (kv) the prefix it already holds."""
    overlap = decision.headers.get("x-rotor-kv-overlap")
    prefill = decision.prefill_tokens
    return {
        "rotor.router": type(router).__name__,
        "rotor.candidates": [w.worker_id for w in candidates],
        "rotor.worker_id": decision.worker_id,
        "gen_ai.usage.input_tokens": len(request.token_ids),
        "rotor.kv.overlap_blocks": int(overlap) if overlap is not None else None,
        "rotor.kv.prefill_tokens": prefill,
    }


def _transfer_id(handover: _Handover) -> str:
    return str(handover.transfer.get("transfer_id", ""))


class _Attempt:
    """What a request's attempt shares with its `PoolStream`: its worker's
    stream and the progress so far, and whether, at the output just
    yielded, nothing is left to do per output but count it (no prefill to
    note, no handover, no held first token)."""

    __slots__ = ("stream", "progress", "steady")

    def __init__(self) -> None:
        self.stream: Any = None
        self.progress: migration.Progress | None = None
        self.steady = False


class PoolStream:
    """A pool's stream of one request (rotor.protocol.engine.Pushed when its
    worker's stream pushes): read, it is the pool's generator; pushed, the
    worker's stream hands its outputs straight to the reader, each counted
    for a migration. When that stream fails the generator takes over again
    (the error thrown in where it stopped, as if read): the migration runs
    in a task of its own and its outputs go on to the reader, pushed again
    once the new attempt can."""

    __slots__ = ("_gen", "_now", "_delivery", "_task", "_stopped", "_context")

    def __init__(self, gen: AsyncIterator[EngineOutput], now: _Attempt) -> None:
        self._gen = gen
        self._now = now
        self._delivery: Delivery | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        # the reader's context (its request's span): a migration's spans are its children
        self._context: contextvars.Context | None = None

    def __aiter__(self) -> PoolStream:
        return self

    def __anext__(self) -> Any:
        return self._gen.__anext__()

    async def aclose(self) -> None:
        self._stopped = True
        self._stop_attempt()
        await self._close()

    # -- pushed ----------------------------------------------------------------------

    @property
    def pushable(self) -> bool:
        stream = self._now.stream
        return self._now.steady and not self._stopped and is_pushed(stream) and stream.pushable

    def deliver(self, delivery: Delivery) -> None:
        self._delivery = delivery
        self._context = contextvars.copy_context()
        self._now.stream.deliver(self)

    def resume(self) -> None:
        stream = self._now.stream
        if is_pushed(stream):
            stream.resume()

    def stop(self) -> None:
        """The reader is gone: the worker's request stops, the pool lets go."""
        self._delivery = None
        self._stopped = True
        self._stop_attempt()
        self._later(self._close())

    def _stop_attempt(self) -> None:
        """A migration under way is cancelled inside the generator (whose own
        ending aborts its attempt); a pushing attempt is stopped."""
        if self._task is not None:
            self._task.cancel()
        stream = self._now.stream
        if is_pushed(stream):
            stream.stop()

    async def _close(self) -> None:
        """The generator's end (its spans, its counts), once no migration runs
        inside it: a running generator cannot be closed."""
        task = self._task
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        await self._gen.aclose()  # type: ignore[attr-defined]

    # the worker's stream's delivery (rotor.protocol.engine.Delivery)

    def outputs(self, outputs: list[EngineOutput]) -> bool:
        delivery = self._delivery
        if delivery is None:
            return False
        progress = self._now.progress
        if progress is not None:
            for out in outputs:
                progress.add(out)
        return delivery.outputs(outputs)

    def ended(self, error: EngineError | None) -> None:
        delivery = self._delivery
        if delivery is None:
            return
        if error is None:  # the attempt ended: the pool's own end (its spans, its counts)
            self._delivery = None
            self._later(self._close())
            delivery.ended(None)
            return
        self._now.steady = False
        self._task = self._in_context(self._carry_on(error))

    async def _carry_on(self, error: EngineError) -> None:
        """The generator's own way on from a failed attempt (a migration, or
        the error to end with), read and handed on until it can push again."""
        gen = self._gen
        try:
            out = await gen.athrow(error)  # type: ignore[attr-defined]
            while self._delivery is not None:
                self._delivery.outputs([out])  # (a held reader: nothing to hold here)
                if self.pushable:
                    self._now.stream.deliver(self)
                    return
                out = await gen.__anext__()
        except StopAsyncIteration:
            delivery, self._delivery = self._delivery, None
            if delivery is not None:
                delivery.ended(None)
        except EngineError as e:
            delivery, self._delivery = self._delivery, None
            if delivery is not None:
                delivery.ended(e)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug: the reader ends with it, not a hang
            log.exception("a pushed pool stream failed")
            delivery, self._delivery = self._delivery, None
            if delivery is not None:
                delivery.ended(EngineError(f"{type(e).__name__}: {e}", "internal"))
        finally:
            self._task = None

    def _later(self, work: Any) -> None:
        """An ending's async part, in a turn of its own."""
        task = self._in_context(work)
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)

    def _in_context(self, work: Any) -> asyncio.Task[Any]:
        """A task in the reader's context (pushed outputs arrive in the
        transport's, where no request's span is current)."""
        create = asyncio.get_running_loop().create_task
        if self._context is None:
            return create(work)
        return self._context.run(create, work)


_BACKGROUND: set[asyncio.Task[Any]] = set()  # endings under way (kept from the collector)
