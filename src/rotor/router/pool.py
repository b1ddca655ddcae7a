"""The workers of one model, and the engine client that routes over them.

`Pool.generate` is the EngineClient contract over remote workers: its
stream (router/pool_stream.py) chooses a worker (the router mode), streams
its outputs, and when the worker becomes unavailable mid-stream (killed,
partitioned, lease gone, silent, or its engine failed its canary) resends
the request to another one (router/migration.py), up to `migration_limit`
times, so the consumer sees one uninterrupted stream. Workers whose lease
says their engine is unhealthy are not live; with overload limits
(router/overload.py) a new request skips the workers past them. A model with prefill workers has its requests'
prefills placed and handed over (router/handover.py).

The pool keeps its members (`upsert`, `remove`, `live`), what this frontend
sent each of them (`LocalLoad`), where each running request went
(`routes`, `routed`), and what it counts for /metrics (`PoolStats`). It
reaches its workers through a `WorkerLink` (the NATS request plane fills
it), and tells whoever built it when a worker joins (`on_join`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from rotor.model.card import ModelCard
from rotor.protocol.engine import EngineError, EngineRequest, EngineState, EngineStream
from rotor.protocol.lease import Lease
from rotor.protocol.routing import Routed
from rotor.protocol.scores import ScorePair
from rotor.router.disagg import DisaggPolicy
from rotor.router.kv import KVRouter, KVStats
from rotor.router.modes import LocalLoad, Pick, Router, WorkerState
from rotor.router.overload import Overload
from rotor.router.pool_stream import PoolStream
from rotor.router.sessions import Sessions
from rotor.router.spans import pick_attributes
from rotor.router.stats import PoolStats
from rotor.tracing import NO_SPAN, Span

log = logging.getLogger("rotor.router")

_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(EngineState))
DEFAULT_REQUEST_TIMEOUT_S = 30.0
DECODE_ROLES = ("agg", "decode")
T = TypeVar("T")


class WorkerLink(Protocol):
    """What a pool needs of the request plane."""

    def generate(
        self,
        worker_id: str,
        request: EngineRequest,
        request_timeout: float,
        headers: dict[str, str] | None = None,
    ) -> EngineStream:
        """`request` on one worker (sent when its stream is first subscribed;
        stopping the stream early aborts it there).
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

    async def score(self, worker_id: str, pairs: list[ScorePair], timeout: float) -> list[float]:
        """The pairs' scores from one worker; EngineError when it cannot give them."""
        ...

    def worker_gone(self, worker_id: str) -> None:
        """The worker left: its running streams end now (and may migrate)."""
        ...

    def release_kv(self, worker_id: str, transfer_id: str) -> None:
        """A prefill's pinned KV blocks are not wanted after all: free them now."""
        ...


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
        overload: Overload | None = None,
    ) -> None:
        """`router` picks among the agg and decode workers, `prefill_router`
        (by default one like `router`'s mode is not shared: give one) among
        the prefill workers; `overload`: the limits past which a worker
        takes no new request (None: none)."""
        self.card = card
        self.link = link
        self.router = router
        self.prefill_router = prefill_router
        self.disagg = disagg or DisaggPolicy()
        self.sessions = sessions  # None: session ids are not followed
        self.overload = overload if overload is not None and overload.on else None
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
            if router is not None and isinstance(router, WorkerState):
                router.remove_worker(worker_id)

    def live(self, roles: tuple[str, ...] | None = None, lora: str | None = None) -> list[Lease]:
        """The workers taking requests (of those roles; holding that adapter):
        serving, and healthy (their engine answers its canary)."""
        return [
            w
            for w in self.workers.values()
            if w.status == "serving"
            and w.healthy
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

    def unhealthy(self) -> list[str]:
        """The serving workers that are not live: their engine failed its canary."""
        return sorted(
            w.worker_id for w in self.workers.values() if w.status == "serving" and not w.healthy
        )

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
        that one fails (up to the migration limit)."""
        return PoolStream(self, request)

    def routes(self, request_id: str, headers: dict[str, str]) -> Routed:
        """Where a request goes, kept until its stream is over (`forget`)."""
        routed = self._routed[request_id] = Routed(headers)
        return routed

    def forget(self, request_id: str) -> None:
        """A request's stream is over: where it went is forgotten once the
        caller's turn is over (an answer that ends at its first output ends
        its stream before the caller, taking that output, reads `routed`)."""
        asyncio.get_running_loop().call_soon(self._routed.pop, request_id, None)

    async def embed(self, inputs: list[list[int]], dimensions: int | None) -> list[list[float]]:
        """The inputs' vectors from one live worker, the router's pick; when it
        is unavailable, from another, up to the migration limit."""
        width = dimensions or self.card.capabilities.embedding_dim
        return await self._pooled(
            "embed",
            inputs[0],
            lambda worker: self.link.embed(worker, inputs, dimensions, width, self.request_timeout),
        )

    async def score(self, pairs: list[ScorePair]) -> list[float]:
        """The pairs' scores from one live worker, as `embed`."""
        return await self._pooled(
            "score",
            pairs[0].token_ids,
            lambda worker: self.link.score(worker, pairs, self.request_timeout),
        )

    async def _pooled(self, kind: str, first: list[int], ask: Callable[[str], Awaitable[T]]) -> T:
        """`ask` one live worker, the router's pick for a request of the
        `first` input's tokens; when it is unavailable, another, up to the
        migration limit."""
        request = EngineRequest(f"{kind}-{uuid.uuid4().hex[:12]}", self.card.name, first)
        tried: set[str] = set()
        while True:
            pick = self.choose(request, tried)
            worker = pick.worker_id
            prefill = self.load.sent(worker, request, pick)
            try:
                return await ask(worker)
            except EngineError as e:
                if e.kind != "unavailable" or len(tried) >= self.migration_limit:
                    raise
                tried.add(worker)
                self.stats.migrations[e.cause or "unavailable"] += 1
                log.warning("%s request %s: %s; trying another worker", kind, request.request_id, e)
            finally:
                self.load.done(worker, prefill)

    # -- routing --------------------------------------------------------------------------

    def choose(self, request: EngineRequest, tried: set[str], route: Span = NO_SPAN) -> Pick:
        """A decode (or agg) worker for `request`, none of `tried` if it can; the
        pick told to `route` (a span that a request with no worker ends)."""
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
        fit = self._not_overloaded(candidates, request, route, moving=bool(tried))
        sessions, session = self.sessions, request.session_id
        if sessions is not None and session is not None and not tried:  # (not a migration)
            keep, outcome = sessions.choose(session, candidates)
            if keep is not None and all(w.worker_id != keep.worker_id for w in fit):
                keep, outcome = None, "moved_overloaded"
            self.stats.sessions[outcome] += 1
            if keep is not None:
                fit = [keep]  # the router still tells its cost (kv: the overlap)
        candidates = fit
        pick = self.router.choose(candidates, request, self.load)
        if sessions is not None and session is not None:
            sessions.pin(session, pick.worker_id)  # a migration's new worker, too
        self.stats.decisions[pick.worker_id] += 1
        pick.headers.setdefault("x-rotor-worker", pick.worker_id)
        if route.recording:
            route.set(pick_attributes(self.router, candidates, request, pick))
        return pick

    def _not_overloaded(
        self, candidates: list[Lease], request: EngineRequest, route: Span, moving: bool
    ) -> list[Lease]:
        """The candidates that are not past the overload limits. None of them:
        a new request is refused ("overloaded", counted); a request that is
        moving (its client has part of its answer) takes them all."""
        overload = self.overload
        if overload is None:
            return candidates
        load = self.load
        fit = [w for w in candidates if overload.why(w, load) is None]
        if fit or moving:
            return fit or candidates
        self.stats.overloaded += 1
        reasons = "; ".join(f"{w.worker_id}: {overload.why(w, load)}" for w in candidates)
        log.info("request %s refused: every worker is overloaded (%s)", request.request_id, reasons)
        error = EngineError(
            f"every worker of the model {self.card.name!r} is overloaded; retry later",
            "unavailable",
            cause="overloaded",
        )
        route.fail(error.message, error.cause)
        route.end()
        raise error
