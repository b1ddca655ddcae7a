"""Overload: when a worker takes no new request (`--max-kv-usage`,
`--max-prefill-tokens`; both off by default).

A worker is overloaded when the share of its device KV blocks in use (its
lease's `EngineState`) is past `max_kv_usage`, or when the prompt tokens
waiting for their prefill on it (its lease's `pending_prefill_tokens` plus
what this frontend sent it since that have not produced output yet,
`LocalLoad.prefilling`: the kv router's view of pending prefill) are past
`max_prefill_tokens`. The pool skips overloaded workers for a new request;
when every live worker is, the request is refused ("overloaded": 503, or
`--overload-status 529`, with Retry-After). A request that is moving off a
failed worker is not refused: it prefers a worker that is not overloaded,
and takes one that is when no other is left (its client already has part
of its answer).
"""

from __future__ import annotations

from dataclasses import dataclass

from rotor.protocol.lease import Lease
from rotor.router.modes import LocalLoad


@dataclass(frozen=True)
class Overload:
    """The limits past which a worker is skipped (None: that limit is off)."""

    max_kv_usage: float | None = None  # share of device KV blocks in use, [0, 1]
    max_prefill_tokens: int | None = None  # prompt tokens waiting for their prefill

    def __post_init__(self) -> None:
        if self.max_kv_usage is not None and not 0 <= self.max_kv_usage <= 1:
            raise ValueError(f"max_kv_usage must be in [0, 1], got {self.max_kv_usage}")
        if self.max_prefill_tokens is not None and self.max_prefill_tokens < 0:
            raise ValueError(f"max_prefill_tokens must be >= 0, got {self.max_prefill_tokens}")

    @property
    def on(self) -> bool:
        return self.max_kv_usage is not None or self.max_prefill_tokens is not None

    def why(self, worker: Lease, load: LocalLoad) -> str | None:
        """Why `worker` is overloaded (a few words for the log), or None: it is not."""
        state = worker.state
        limit = self.max_kv_usage
        if limit is not None and state.kv_blocks_total > 0:
            usage = (state.kv_blocks_total - state.kv_blocks_free) / state.kv_blocks_total
            if usage > limit:
                return f"KV usage {usage:.2f} > {limit:g}"
        tokens = self.max_prefill_tokens
        if tokens is not None:
            pending = state.pending_prefill_tokens + load.prefilling[worker.worker_id]
            if pending > tokens:
                return f"{pending} prefill tokens pending > {tokens}"
        return None
