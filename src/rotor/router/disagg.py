"""Conditional disaggregation: for one request of a model that has prefill
workers, prefill it on one of them (remote) or on its decode worker (local).

A remote prefill pays a transfer of the prompt's KV blocks and a second hop;
it pays off when the prompt is long enough that computing it on the decode
worker would stall that worker's decoding streams. So, per policy:

- `always`: remote, whenever a prefill worker is live.
- `isl`: local when the *effective* prompt — its tokens minus what the
  decode worker already caches — is shorter than `min_tokens`, or when the
  decode worker already holds at least `max_cached_ratio` of it; else remote.
  (Dynamo compares the raw prompt length; a prompt the decode worker mostly
  holds costs it little, however long it is.)
- `load` (the default): local when every prefill worker is busier than
  `busy_tokens` queued prompt tokens (a queue behind them costs more than
  the stall).
- `isl_or_load`: local when either says so.

Why `load` is the default: the handover is part of the time to the first
token (router/pool.py holds the first token for it), so a remote prefill
costs TTFT only, and little (a hop and a fetch: 20-40 ms p50 in the
benchmark), while a local one stalls every stream on its decode worker.
Measured (docs/benchmarks.md#disaggregated-serving), `load` matches `always`
where the prefill pool keeps up, keeps the TTFT that `always` loses when it
does not (1 prefill + 3 decode workers on long prompts), and beats
`isl_or_load` at 2048 tokens in all but one run (a draw), short prompts
included (where a decode worker prefilling them all alone loses to the
aggregated shape).
`isl` and `isl_or_load` are for a slow link, where the fetch is what costs.

Every decision has a reason, counted by the pool and logged at debug.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger("rotor.router.disagg")

Policy = Literal["always", "isl", "load", "isl_or_load"]
POLICIES = ("always", "isl", "load", "isl_or_load")
Where = Literal["remote", "local"]

DEFAULT_MIN_TOKENS = 2048
DEFAULT_MAX_CACHED_RATIO = 0.7
# A prefill worker is busy past this many queued prompt tokens, in units of
# its own per-step token budget (when the worker reports one).
BUSY_BUDGETS = 4
FALLBACK_BUDGET = 8192  # a worker that reports no budget: the mocker's and vLLM's usual


@dataclass(frozen=True, slots=True)
class Placement:
    where: Where
    # always | long | idle | short | cached | busy | no_prefill_worker | prefill_failed
    reason: str


@dataclass(frozen=True, slots=True)
class DisaggPolicy:
    policy: Policy = "load"
    min_tokens: int = DEFAULT_MIN_TOKENS
    max_cached_ratio: float = DEFAULT_MAX_CACHED_RATIO
    busy_tokens: int = 0  # 0: BUSY_BUDGETS × each prefill worker's own budget
    enforce: bool = False  # never prefill locally: no prefill worker is a 503

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"disagg policy {self.policy!r} is not one of {', '.join(POLICIES)}")
        if self.min_tokens < 0:
            raise ValueError(f"--disagg-min-tokens must be >= 0, got {self.min_tokens}")
        if not 0.0 <= self.max_cached_ratio <= 1.0:
            raise ValueError(
                f"--disagg-max-cached-ratio must be in [0, 1], got {self.max_cached_ratio}"
            )
        if self.busy_tokens < 0:
            raise ValueError(f"--prefill-busy-threshold must be >= 0, got {self.busy_tokens}")

    def busy(self, queued_tokens: int, budget: int) -> bool:
        """A prefill worker with this many prompt tokens queued is too busy."""
        threshold = self.busy_tokens or BUSY_BUDGETS * (budget or FALLBACK_BUDGET)
        return queued_tokens > threshold

    def decide(
        self, prompt_tokens: int, cached_tokens: int, prefill_queues: list[tuple[int, int]]
    ) -> Placement:
        """Where one request is prefilled. `cached_tokens`: what its decode
        worker already holds of the prompt; `prefill_queues`: (queued prompt
        tokens, per-step budget) of each live prefill worker (none: local)."""
        if not prefill_queues:
            return Placement("local", "no_prefill_worker")
        if self.enforce or self.policy == "always":
            return Placement("remote", "always")
        if self.policy in ("isl", "isl_or_load"):
            effective = max(0, prompt_tokens - cached_tokens)
            if effective < self.min_tokens:
                return Placement("local", "short")
            if prompt_tokens and cached_tokens / prompt_tokens >= self.max_cached_ratio:
                return Placement("local", "cached")
        if self.policy in ("load", "isl_or_load") and all(
            self.busy(queued, budget) for queued, budget in prefill_queues
        ):
            return Placement("local", "busy")
        return Placement("remote", "long" if self.policy != "load" else "idle")
