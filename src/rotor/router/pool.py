"""The workers of one model, and the engine client that routes over them.

`Pool.generate` is the Engine contract over remote workers: choose a worker
(the router mode), stream its outputs, and when the worker dies mid-stream
(killed, partitioned, lease gone, silent) resend the request to another
worker with the tokens generated so far appended to the prompt and the
limits reduced, so the consumer sees one uninterrupted stream — up to
`migration_limit` times. A request under a decoding constraint moves only
when the engine says it can resume one (`Capabilities.resumable_constraints`).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from rotor.model.card import ModelCard
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest, EngineState
from rotor.router.modes import Decision, Router
from rotor.runtime.lease import Lease
from rotor.runtime.remote import DEFAULT_REQUEST_TIMEOUT_S, ResponseRouter

log = logging.getLogger("rotor.router")

_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(EngineState))
# Engines that play scripted output (the mocker's `mock`, echo) continue from
# this many generated tokens when a request is resumed elsewhere.
RESUME_FROM = "resume_from"


@dataclass
class PoolStats:
    """What /metrics reports about routing (`rotor_router_*`)."""

    decisions: collections.Counter[str] = field(default_factory=collections.Counter)
    migrations: collections.Counter[str] = field(default_factory=collections.Counter)
    no_worker: int = 0


class Pool:
    def __init__(
        self,
        card: ModelCard,
        inbox: ResponseRouter,
        router: Router,
        migration_limit: int = 3,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
    ) -> None:
        self.card = card
        self.inbox = inbox
        self.router = router
        self.migration_limit = migration_limit
        self.request_timeout = request_timeout
        self.workers: dict[str, Lease] = {}
        self.in_flight: collections.Counter[str] = collections.Counter()
        # Prompt tokens sent to a worker that has not answered them yet (the
        # router adds them to the load the worker last published).
        self.prefilling: collections.Counter[str] = collections.Counter()
        self.on_join: Callable[[str], None] | None = None
        self.stats = PoolStats()
        self._decisions: dict[str, Decision] = {}
        self._serving: dict[str, tuple[str, str]] = {}  # request id -> (worker, attempt id)

    # -- membership ------------------------------------------------------------------

    def upsert(self, lease: Lease) -> None:
        new = lease.worker_id not in self.workers
        self.workers[lease.worker_id] = lease
        if new and self.on_join is not None:
            self.on_join(lease.worker_id)

    def remove(self, worker_id: str) -> None:
        self.workers.pop(worker_id, None)
        self.inbox.worker_gone(worker_id)
        forget = getattr(self.router, "remove_worker", None)
        if forget is not None:
            forget(worker_id)

    def live(self) -> list[Lease]:
        return [w for w in self.workers.values() if w.status == "serving"]

    def describe(self) -> list[dict]:
        """The live workers, for /health."""
        index = getattr(self.router, "index", None)
        out = []
        for w in sorted(self.live(), key=lambda w: w.worker_id):
            info = {
                "id": w.worker_id,
                "address": w.address,
                "active_requests": w.state.active_requests,
                "in_flight_here": self.in_flight[w.worker_id],
                "kv_blocks_used": w.state.kv_blocks_total - w.state.kv_blocks_free,
            }
            if index is not None:  # kv routing: what this frontend's index holds of it
                info["kv_blocks_indexed"] = index.num_blocks(w.worker_id)
            out.append(info)
        return out

    # -- the engine contract ------------------------------------------------------------

    def state(self) -> EngineState:
        total = EngineState()
        for w in self.live():
            for name in _STATE_FIELDS:
                setattr(total, name, getattr(total, name) + getattr(w.state, name))
        return total

    def routed(self, request_id: str) -> dict[str, str]:
        decision = self._decisions.get(request_id)
        return dict(decision.headers) if decision is not None else {}

    def abort(self, request_id: str) -> None:
        serving = self._serving.get(request_id)
        if serving is not None:
            self.inbox.abort(*serving)

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        rid = request.request_id
        produced: list[int] = []  # token ids generated so far, over every attempt
        steps = 0  # outputs that carried text (text-out engines: one token each)
        tried: set[str] = set()
        attempt = request
        migrations = 0
        try:
            while True:
                decision = self._choose(attempt, tried)
                worker = decision.worker_id
                if rid not in self._decisions:
                    self._decisions[rid] = decision
                self._serving[rid] = (worker, attempt.request_id)
                self.in_flight[worker] += 1
                prefill = decision.prefill_tokens
                prefill = len(attempt.token_ids) if prefill is None else prefill
                self.prefilling[worker] += prefill
                stream = self.inbox.generate(worker, attempt, self.request_timeout)
                try:
                    async for out in stream:
                        if prefill:
                            self._prefilled(worker, prefill)
                            prefill = 0
                        produced.extend(out.token_ids)
                        if out.text is not None:
                            steps += 1
                        yield out
                    return
                except EngineError as e:
                    if e.kind != "unavailable":
                        raise
                    tried.add(worker)
                    cause = _cause(e)
                    if migrations >= self.migration_limit:
                        raise EngineError(
                            f"{e.message}; gave up after {migrations} migration(s)",
                            "unavailable",
                        ) from None
                    if request.sampling.guided is not None and not (
                        self.card.capabilities.resumable_constraints
                    ):
                        raise EngineError(
                            f"{e.message}; the request's decoding constraint cannot resume "
                            f"on another worker",
                            "unavailable",
                        ) from None
                    migrations += 1
                    self.stats.migrations[cause] += 1
                    log.warning(
                        "request %s: %s; migrating (%d/%d) with %d tokens so far",
                        rid,
                        e.message,
                        migrations,
                        self.migration_limit,
                        len(produced) + steps,
                    )
                    attempt = _resumed(request, produced, steps, migrations)
                finally:
                    await stream.aclose()  # type: ignore[attr-defined]  # aborts it if it runs
                    self._prefilled(worker, prefill)
                    self.in_flight[worker] -= 1
                    if self.in_flight[worker] <= 0:
                        del self.in_flight[worker]
        finally:
            self._decisions.pop(rid, None)
            self._serving.pop(rid, None)

    def _prefilled(self, worker: str, tokens: int) -> None:
        self.prefilling[worker] -= tokens
        if self.prefilling[worker] <= 0:
            del self.prefilling[worker]

    def _choose(self, request: EngineRequest, tried: set[str]) -> Decision:
        live = self.live()
        candidates = [w for w in live if w.worker_id not in tried] or live
        if not candidates:
            self.stats.no_worker += 1
            raise EngineError(f"no live worker serves the model {self.card.name!r}", "unavailable")
        decision = self.router.choose(candidates, request)
        self.stats.decisions[decision.worker_id] += 1
        decision.headers.setdefault("x-rotor-worker", decision.worker_id)
        return decision


def _cause(error: EngineError) -> str:
    message = error.message
    if "gone" in message:
        return "worker_gone"
    if "stopped answering" in message or "no output" in message:
        return "timeout"
    if "shutting down" in message:
        return "shutting_down"
    return "unavailable"


def _resumed(
    request: EngineRequest, produced: list[int], steps: int, migration: int
) -> EngineRequest:
    """The request as another worker continues it: its output so far is now
    part of the prompt, and the limits count what is already done."""
    done = len(produced) + steps
    stop = replace(
        request.stop,
        max_tokens=max(1, request.stop.max_tokens - done),
        min_tokens=max(0, request.stop.min_tokens - done),
    )
    annotations = dict(request.annotations)
    annotations[RESUME_FROM] = annotations.get(RESUME_FROM, 0) + done
    return replace(
        request,
        request_id=f"{request.request_id}-m{migration}",
        token_ids=[*request.token_ids, *produced],
        stop=stop,
        annotations=annotations,
    )
