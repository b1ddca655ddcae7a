"""The disaggregated handover, in named steps: where a request is prefilled
(`place`), the prefill on a prefill worker (`prefill_on`), and the request
as its decode worker continues it (`decode_request`).

When a model has prefill workers (`Lease.role`), a request is routed in two
stages: its decode worker first (the pool's router, over the agg and decode
workers), then — when the disaggregation policy says so (router/disagg.py) —
a prefill worker (the pool's `prefill_router`), which computes the prompt
and answers with the first token and where its KV blocks are; the decode
worker fetches them and goes on. The prompt's images go to the prefill
worker; the decode worker gets their hashes and spans, not their bytes. A prefill that cannot happen (no prefill
worker, a refusal, a failure, a death) is done by the decode worker itself,
counted, unless the policy enforces disaggregation (then it is a 503).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    EngineError,
    EngineOutput,
    EngineRequest,
    pulled,
)
from rotor.protocol.lease import Lease
from rotor.router import migration
from rotor.router.disagg import Placement
from rotor.router.modes import Pick
from rotor.router.spans import attempt_span
from rotor.tracing import Span

if TYPE_CHECKING:
    from rotor.router.pool import Pool

log = logging.getLogger("rotor.router")


@dataclass(slots=True)
class Handover:
    """A remote prefill's answer: its first output, where the blocks are."""

    first: EngineOutput
    worker: str
    transfer: dict[str, Any]
    at: float  # when the answer came (monotonic)

    @property
    def transfer_id(self) -> str:
        return str(self.transfer.get("transfer_id", ""))


def place(pool: Pool, request: EngineRequest, pick: Pick, route: Span) -> Placement | None:
    """Where `request` (bound for `pick`'s worker) is prefilled: None for an
    aggregated model (no decision to count), else the policy's placement,
    told to `route` (which it ends). A 503 when the policy enforces
    disaggregation and no prefill worker can take it."""
    prefill_workers = pool.live(("prefill",), request.lora)
    if not prefill_workers and not pool.disagg.enforce and not pool.live(("decode",)):
        return None
    prompt = len(request.token_ids)
    cached = prompt - pick.prefill_tokens if pick.prefill_tokens is not None else 0
    placement = pool.disagg.decide(prompt, cached, _queues(pool, prefill_workers))
    route.set({"rotor.disagg.where": placement.where, "rotor.disagg.reason": placement.reason})
    route.end()
    if placement.where == "local":
        if pool.disagg.enforce:
            raise unavailable(pool, request, "no live prefill worker serves the model")
        counted(pool, request, pick, placement)
    return placement


def counted(pool: Pool, request: EngineRequest, pick: Pick, placement: Placement) -> None:
    """A placement made (or a remote one that fell back): counted, and logged at debug."""
    pool.stats.disagg[(placement.where, placement.reason)] += 1
    if log.isEnabledFor(logging.DEBUG):
        prompt = len(request.token_ids)
        cached = prompt - pick.prefill_tokens if pick.prefill_tokens is not None else 0
        log.debug(
            "request %s: prefill %s (%s): %d prompt tokens, %d cached on %s",
            request.request_id,
            placement.where,
            placement.reason,
            prompt,
            cached,
            pick.worker_id,
        )


def _queues(pool: Pool, workers: list[Lease]) -> list[tuple[int, int]]:
    """(queued prompt tokens, per-step budget) of each prefill worker."""
    prefilling = pool.load.prefilling
    return [
        (w.state.pending_prefill_tokens + prefilling[w.worker_id], w.state.max_batched_tokens)
        for w in workers
    ]


async def prefill_on(
    pool: Pool, request: EngineRequest, pick: Pick, placement: Placement
) -> Handover | None:
    """Run the prefill that `placement` (remote) sent to the prefill pool on
    one of its live workers; None when it did not work out (counted as a
    local prefill, `prefill_failed`; a 503 instead when disaggregation is
    enforced)."""
    handover = await _prefill(pool, request, pick)
    if handover is None:
        pick.headers["x-rotor-worker"] = pick.worker_id
        placement = Placement("local", "prefill_failed")
    counted(pool, request, pick, placement)
    return handover


async def _prefill(pool: Pool, request: EngineRequest, pick: Pick) -> Handover | None:
    workers = pool.live(("prefill",), request.lora)
    router = pool.prefill_router or pool.router
    job = replace(
        request,
        request_id=f"{request.request_id}-p",
        stop=replace(request.stop, max_tokens=1, min_tokens=min(request.stop.min_tokens, 1)),
        annotations={**request.annotations, PREFILL_ONLY: True},
    )
    if not workers:
        _failed(pool, request, "no live prefill worker serves the model")
        return None
    chosen = router.choose(workers, job, pool.load)
    worker = chosen.worker_id
    pool.stats.decisions[worker] += 1
    pick.headers["x-rotor-worker"] = f"prefill={worker}, decode={pick.worker_id}"
    tokens = pool.load.sent(worker, job, chosen)
    first: EngineOutput | None = None
    span = attempt_span(worker, job, 0, None, False)
    outputs = pulled(pool.link.generate(worker, job, pool.request_timeout, span.headers()))
    try:
        async for out in outputs:
            if out.kv_transfer is not None:
                first = out
    except EngineError as e:
        span.fail(e.message, e.cause)
        _failed(pool, request, f"the prefill on worker {worker} failed: {e.message}")
        return None
    finally:
        if first is None:
            span.fail(f"worker {worker} handed over no KV blocks")
        span.end()
        await outputs.aclose()
        pool.load.done(worker, tokens)
    if first is None or first.kv_transfer is None:
        _failed(pool, request, f"worker {worker} handed over no KV blocks")
        return None
    answer = EngineOutput(
        index=first.index,
        token_ids=first.token_ids,
        logprobs=first.logprobs,
        cached_tokens=first.cached_tokens,
        prompt_logprobs=first.prompt_logprobs,
    )
    return Handover(answer, worker, first.kv_transfer, time.monotonic())


def _failed(pool: Pool, request: EngineRequest, why: str) -> None:
    """A prefill that did not work out: the decode worker prefills it
    (logged), unless disaggregation is enforced (a 503)."""
    if pool.disagg.enforce:
        raise unavailable(pool, request, why)
    log.warning("request %s: %s; prefilling locally", request.request_id, why)


def decode_request(
    request: EngineRequest,
    progress: migration.Progress,
    handover: Handover,
    enforce: bool,
    keep_images: bool = False,
) -> EngineRequest:
    """The request as its decode worker continues it: the first token is
    part of its prompt, and it fetches the prompt's blocks. Its images go
    without their bytes (the KV of their tokens is fetched, not computed
    again), keeping their hashes and spans, so the blocks hash alike —
    unless `keep_images`: an engine that expands placeholders itself (vLLM,
    Capabilities.images_at_decode) needs them to build the prompt."""
    transfer = {**handover.transfer, "worker": handover.worker}
    if enforce:
        transfer["enforce"] = True
    decode = migration.resumed(
        request, progress, f"{request.request_id}-d", {KV_TRANSFER: transfer}
    )
    if decode.images and not keep_images:
        decode.images = [replace(image, data=None) for image in decode.images]
    return decode


def ends_the_answer(request: EngineRequest, first: EngineOutput) -> bool:
    """Whether the prefill's first token surely ends the answer (its last
    token allowed, or a stop token): then it is not held for a decode."""
    stop = request.stop
    if stop.max_tokens <= len(first.token_ids):
        return True
    ids = {*stop.stop_token_ids, *stop.visible_stop_token_ids}
    if not stop.ignore_eos:
        ids.update(stop.eos_token_ids)
    return stop.min_tokens <= len(first.token_ids) and not ids.isdisjoint(first.token_ids)


def unavailable(pool: Pool, request: EngineRequest, why: str) -> EngineError:
    """The 503 of a request that --enforce-disagg keeps from its decode workers."""
    pool.stats.disagg[("refused", "enforced")] += 1
    return EngineError(
        f"{why}; --enforce-disagg keeps {pool.card.name!r} from prefilling on its decode workers",
        "unavailable",
        cause="no_worker",
    )
