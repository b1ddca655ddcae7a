"""The KV router's decision: which worker serves a prompt, weighing cache hits against load.

For a prompt of P full blocks and a worker w whose cache holds its first O(w)
blocks — D(w) of them on the device or predicted there, H(w) only in host
memory, K(w) only on disk (router/kv_index.Overlap) — the blocks it is
credited with are

    C(w) = D(w) + host_weight * H(w) + disk_weight * K(w)

and

    prefill(w) = P - C(w) + pending_prefill_blocks(w)
    cost(w)    = overlap_weight * prefill(w) + active_decode_blocks(w)

(Dynamo's form, its tier weights 0.75 and 0.25 by default.) The prefill term
is the work the worker must do before this prompt's first token: its
uncached blocks computed, and a lower medium's blocks brought up, each
costing (1 - its weight) of computing it (a host block a quarter of one, at
0.75), behind the prompt work already queued; the decode term is the KV the
worker's running sequences occupy, which slows its every step and is what a
flooded worker runs out of. The lowest cost
wins; ties go to the lesser load (decode + pending prefill blocks, then queue
length), then to the smallest worker id. With `temperature > 0` the worker is
instead sampled with probability proportional to exp(-c / T), c the cost
normalised to [0, 1] over the candidates, so equal costs are equally likely
and T spreads load across near-equal workers.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from rotor.router.kv_index import Overlap

WorkerId = Hashable

DEFAULT_OVERLAP_WEIGHT = 4.0  # chosen by benchmarks/kv_router_sim.py --sweep (see the report)
DEFAULT_TEMPERATURE = 0.0
# What a block found in a lower medium is worth against one on the device
# (Dynamo's defaults): bringing it up costs the rest of computing it.
DEFAULT_HOST_HIT_WEIGHT = 0.75
DEFAULT_DISK_HIT_WEIGHT = 0.25


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """What a worker publishes about its load, as the router's cost reads it."""

    active_decode_blocks: int = 0  # KV blocks its running sequences hold (shared prefixes once)
    pending_prefill_tokens: int = 0  # prompt tokens admitted or queued, not yet computed
    queue_length: int = 0  # requests waiting for their first step

    def pending_prefill_blocks(self, block_size: int) -> float:
        return self.pending_prefill_tokens / block_size


@dataclass(frozen=True, slots=True)
class Candidate:
    """One worker's cost terms for one decision."""

    worker: WorkerId
    overlap_blocks: int  # O(w): leading prompt blocks it holds, in any medium
    new_prefill_blocks: float  # P - C(w): blocks to compute, or to bring up (weighted)
    pending_prefill_blocks: float
    decode_blocks: int
    cost: float
    queue_length: int = 0
    media: Overlap | None = None  # the O(w) blocks by where each sits (None: on the device)

    @property
    def tiers(self) -> Overlap:
        """The O(w) blocks by where each sits."""
        media = self.media
        return media if media is not None else Overlap(self.overlap_blocks)

    @property
    def load(self) -> float:
        return self.decode_blocks + self.pending_prefill_blocks

    def describe(self) -> str:
        t = self.tiers
        lower = " ".join(
            f"{name}={n}"
            for name, n in (("host", t.host), ("disk", t.disk), ("predicted", t.predicted))
            if n
        )
        return (
            f"{self.worker}: cost={self.cost:g} overlap={self.overlap_blocks}"
            f"{f' [{lower}]' if lower else ''} "
            f"prefill={self.new_prefill_blocks:g}+{self.pending_prefill_blocks:g} "
            f"decode={self.decode_blocks} queue={self.queue_length}"
        )


@dataclass(frozen=True, slots=True)
class Ranking:
    """The chosen worker and why: every candidate's terms, cheapest first."""

    worker: WorkerId
    overlap_blocks: int
    prompt_blocks: int
    candidates: tuple[Candidate, ...]
    sampled: bool = False  # True: drawn with temperature, not simply the cheapest

    @property
    def chosen(self) -> Candidate:
        """The chosen worker's terms."""
        return next(c for c in self.candidates if c.worker == self.worker)

    @property
    def tiers(self) -> Overlap:
        """The chosen worker's overlap by where each block sits."""
        return self.chosen.tiers

    @property
    def header(self) -> str:
        """The value of `x-rotor-kv-overlap`: the chosen worker's overlap in blocks."""
        return str(self.overlap_blocks)

    @property
    def tiers_header(self) -> str:
        """The value of `x-rotor-kv-tiers`: `device=8,host=3,disk=1,predicted=0`."""
        return self.tiers.describe()

    def log_line(self) -> str:
        how = "sampled" if self.sampled else "cheapest"
        terms = "; ".join(c.describe() for c in self.candidates)
        return (
            f"kv route -> {self.worker} ({how}) overlap {self.overlap_blocks}/"
            f"{self.prompt_blocks} blocks ({self.tiers_header}) | {terms}"
        )


class KVCost:
    """Scores workers for a prompt and picks one; `rng` makes sampling repeatable."""

    def __init__(
        self,
        block_size: int,
        overlap_weight: float = DEFAULT_OVERLAP_WEIGHT,
        temperature: float = DEFAULT_TEMPERATURE,
        rng: random.Random | None = None,
        host_weight: float = DEFAULT_HOST_HIT_WEIGHT,
        disk_weight: float = DEFAULT_DISK_HIT_WEIGHT,
    ) -> None:
        """`host_weight`, `disk_weight`: what a block found only in host memory,
        or only on disk, is worth against one on the device (1); a lower
        medium is worth no more than the one above it."""
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        if not overlap_weight >= 0 or math.isinf(overlap_weight):
            raise ValueError(f"overlap_weight must be a finite number >= 0, got {overlap_weight}")
        if not temperature >= 0 or math.isinf(temperature):
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
        if not 0 <= disk_weight <= host_weight <= 1:
            raise ValueError(
                "the hit weights must be 0 <= disk <= host <= 1, got "
                f"host {host_weight}, disk {disk_weight}"
            )
        self.host_weight = host_weight
        self.disk_weight = disk_weight
        self.block_size = block_size
        self.overlap_weight = overlap_weight
        self.temperature = temperature
        self.rng = rng or random.Random()

    def credit(self, tiers: Overlap) -> float:
        """C(w): the overlap in device blocks, each lower medium's at its weight."""
        return tiers.credit(self.host_weight, self.disk_weight)

    def candidate(
        self, worker: WorkerId, prompt_blocks: int, overlap: int | Overlap, load: WorkerLoad
    ) -> Candidate:
        """One worker's terms; an overlap given as a number is on the device."""
        # (written out: this runs for every candidate of every decision)
        media: Overlap | None = None
        if isinstance(overlap, Overlap):
            media = overlap
            device, host, disk, predicted = media
            blocks = device + host + disk + predicted
            if blocks > prompt_blocks:
                media = media.capped(prompt_blocks)
                device, host, disk, predicted = media
                blocks = prompt_blocks
            new = prompt_blocks - (
                device + predicted + self.host_weight * host + self.disk_weight * disk
            )
        else:
            blocks = min(overlap, prompt_blocks)
            new = prompt_blocks - blocks
        pending = load.pending_prefill_blocks(self.block_size)
        cost = self.overlap_weight * (new + pending) + load.active_decode_blocks
        return Candidate(
            worker,
            blocks,
            new,
            pending,
            load.active_decode_blocks,
            cost,
            load.queue_length,
            media,
        )

    def choose(
        self,
        prompt_blocks: int,
        overlaps: Mapping[WorkerId, int] | Mapping[WorkerId, Overlap],
        loads: Mapping[WorkerId, WorkerLoad],
    ) -> Ranking:
        """Pick among the workers in `loads` (the live ones); `overlaps` (blocks
        on the device, or each worker's `Overlap`) may leave out workers that
        hold nothing (and may name workers not live)."""
        if prompt_blocks < 0:
            raise ValueError(f"prompt_blocks must be >= 0, got {prompt_blocks}")
        if not loads:
            raise ValueError("no live worker to route to")
        ranked = sorted(
            (
                self.candidate(w, prompt_blocks, overlaps.get(w, 0), load)
                for w, load in loads.items()
            ),
            key=lambda c: (c.cost, c.load, c.queue_length, c.worker),
        )
        chosen, sampled = ranked[0], False
        if self.temperature > 0 and len(ranked) > 1:
            chosen, sampled = self._sample(ranked), True
        return Ranking(chosen.worker, chosen.overlap_blocks, prompt_blocks, tuple(ranked), sampled)

    def probabilities(self, ranked: tuple[Candidate, ...] | list[Candidate]) -> list[float]:
        """Softmax over costs normalised to [0, 1]: exp(-c / T), summing to 1."""
        low = ranked[0].cost
        span = max(c.cost for c in ranked) - low
        if span <= 0:
            return [1.0 / len(ranked)] * len(ranked)
        weights = [math.exp(-((c.cost - low) / span) / self.temperature) for c in ranked]
        total = sum(weights)
        return [w / total for w in weights]

    def _sample(self, ranked: list[Candidate]) -> Candidate:
        point = self.rng.random()
        for cand, p in zip(ranked, self.probabilities(ranked), strict=True):
            point -= p
            if point < 0:
                return cand
        return ranked[-1]  # rounding left a sliver past the last
