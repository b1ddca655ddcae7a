"""What a pool's spans say: one request sent to one worker (`rotor.attempt`),
and a routing decision (`rotor.route`'s attributes)."""

from __future__ import annotations

from typing import Any

from rotor import tracing
from rotor.protocol.engine import PREFILL_ONLY, RESUME_FROM, EngineRequest
from rotor.protocol.lease import Lease
from rotor.router.modes import Pick, Router
from rotor.tracing import NO_SPAN, Span


def attempt_span(
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


def pick_attributes(
    router: Router, candidates: list[Lease], request: EngineRequest, pick: Pick
) -> dict[str, Any]:
    """What a routing decision's span says: the mode, the candidates, the
    worker chosen, and (kv) the prefix it already holds, in all and by where
    its blocks sit (`rotor.kv.device_blocks`, `…host_blocks`, `…disk_blocks`,
    `…predicted_blocks`)."""
    overlap = pick.headers.get("x-rotor-kv-overlap")
    attributes: dict[str, Any] = {
        "rotor.router": type(router).__name__,
        "rotor.candidates": [w.worker_id for w in candidates],
        "rotor.worker_id": pick.worker_id,
        "gen_ai.usage.input_tokens": len(request.token_ids),
        "rotor.kv.overlap_blocks": int(overlap) if overlap is not None else None,
        "rotor.kv.prefill_tokens": pick.prefill_tokens,
    }
    tiers = pick.headers.get("x-rotor-kv-tiers")
    if tiers is not None:  # device=8,host=3,disk=1,predicted=0
        for item in tiers.split(","):
            medium, _, count = item.partition("=")
            attributes[f"rotor.kv.{medium}_blocks"] = int(count)
    return attributes
