"""One request-log record per finished generating request (`--request-log`).

The access-log middleware (api/access_log.py) hands over what it saw when the
request was over — its status, its times, what the route noted in the
request's state (api/access_state.py) — once per request. What costs CPU (the
inter-token percentiles, the prompt's KV block hashes, the JSON) is left to
the log's writer thread: `Record.encode` runs there, off the event loop.

A record is what a bench needs to replay the traffic (`rotor bench --trace-format
rotor`: bench/rotor_trace.py) and an operator to read it; it never holds the
prompt's or the answer's text. Its fields are documented in docs/operating.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from rotor.api.access_state import Access
from rotor.pipeline.preprocess import Prepared
from rotor.protocol.kv import Placed, block_hashes, chain_root

# The routes that generate: every API's own (tokenize, probes and pages are not logged).
GENERATING = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"})

# The block size the kv router hashes at when the engine names none (as
# serve/frontend.APPROX_BLOCK_SIZE: vLLM's and the mocker's default).
DEFAULT_BLOCK_SIZE = 16

_UNFINISHED = "cancelled"  # a choice that never ended (its client went away)
_FAILED = "error"  # a choice that ended in a failure


class Record:
    """A finished request, its costly parts not computed yet."""

    __slots__ = ("fields", "gaps", "token_ids", "block_size", "root", "images")

    def __init__(
        self,
        fields: dict[str, Any],
        gaps: list[float] | None,
        token_ids: Sequence[int] | None,
        block_size: int,
        root: int | None = None,
        images: Sequence[Placed] = (),
    ) -> None:
        self.fields = fields
        self.gaps = gaps
        self.token_ids = token_ids  # set only when the log records hashes
        self.block_size = block_size
        self.root = root  # the chain's root: its adapter's and cache_salt's (protocol/kv.py)
        self.images = images  # the prompt's: their blocks hash their content (protocol/kv.py)

    def encode(self) -> bytes:
        """The record as one JSON line (no newline); called on the writer's thread."""
        out = self.fields
        gaps = self.gaps
        if gaps:
            ordered = sorted(gaps)
            out["itl_p50_s"] = _seconds(_median(ordered))
            out["itl_max_s"] = _seconds(ordered[-1])
        if self.token_ids is not None:
            out["block_size"] = self.block_size
            out["block_hashes"] = block_hashes(
                self.token_ids, self.block_size, self.root, self.images
            )
        return orjson.dumps(out)


def record(
    path: str,
    status: int,
    access: Access,
    request_id: str,
    arrival: float,
    t0: float,
    end: float,
    gone: bool,
    hashes: bool,
) -> Record:
    """The record of a request to `path` (one of GENERATING) that ended at
    `end` (perf_counter; `t0` its start, `arrival` the same moment in unix
    seconds); `hashes`: with the prompt's KV block hashes."""
    resp = access.response
    fields: dict[str, Any] = {
        "arrival": round(arrival, 6),
        "request_id": request_id,
        "route": path,
        "model": resp.model if resp is not None else access.model,
        "status": 499 if gone else status,
        "stream": bool(access.stream),
    }
    timing = access.timing
    if resp is None:
        fields["e2e_s"] = _seconds(end - t0)
        return Record(fields, None, None, 0)
    usage = resp.usage
    fields["prompt_tokens"] = usage.prompt_tokens
    if usage.cached_tokens is not None:
        fields["cached_tokens"] = usage.cached_tokens
    fields["completion_tokens"] = usage.completion_tokens
    images = resp.prepared[0].requests[0].images if resp.prepared else []
    if images:  # how many and how many tokens, never their bytes
        fields["images"] = len(images)
        fields["image_tokens"] = sum(image.length for image in images)
    if timing is not None and timing.first is not None:
        fields["ttft_s"] = _seconds(timing.first - t0)
    fields["e2e_s"] = _seconds(end - t0)
    fields["finish_reasons"] = _finish_reasons(resp.prepared)
    worker = resp.headers.get("x-rotor-worker")
    if worker is not None:
        fields["worker"] = worker
    routed = resp.routed
    if routed is not None:  # a pool's: every move to another worker, as it happened
        fields["migrations"] = [{"cause": c, "worker": w} for c, w in routed.migrations]
    overlap = resp.headers.get("x-rotor-kv-overlap")
    if overlap is not None and overlap.isdigit():
        fields["kv_overlap_blocks"] = int(overlap)
    token_ids, root = None, None
    if hashes and resp.prepared:
        first = resp.prepared[0].requests[0]
        token_ids, root = first.token_ids, chain_root(first.lora, first.cache_salt)
    block_size = resp.served.card.capabilities.kv_block_size
    gaps = timing.gaps if timing is not None else None
    size = block_size if block_size > 0 else DEFAULT_BLOCK_SIZE
    return Record(fields, gaps, token_ids, size, root, images)


def _finish_reasons(prepared: Sequence[Prepared]) -> list[str]:
    """Each choice's finish_reason, in order; `cancelled` or `error` where it had none."""
    reasons = []
    for p in prepared:
        for choice in p.choices:
            finished = choice.finished
            if finished is None:
                reasons.append(_UNFINISHED)
            elif finished.failure is not None:
                reasons.append(_FAILED)
            else:
                reasons.append(finished.finish_reason)
    return reasons


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _seconds(value: float) -> float:
    """Seconds to the microsecond: enough for latencies, and short lines."""
    return round(max(value, 0.0), 6)
