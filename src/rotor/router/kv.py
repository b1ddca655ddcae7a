"""`--router kv`: send each request to the worker whose KV cache already
holds the longest prefix of its prompt, weighed against load.

The prompt's blocks are hashed once per decision (protocol/kv's specified
hash, at the engine's block size, a block holding an image's tokens with
that image's content hash, as the engines hash it); `KVIndex` says how many leading blocks each
worker holds and where (from its events: device, host, disk; and predicted,
below), or `ApproxKVIndex` what this frontend routed where recently
(`--no-kv-events`); `KVCost` decides, weighing each medium's blocks, from the
load workers publish plus the prefill this frontend has sent that has not
started yet.

Predicted routing (`--router-predicted-ttl`): the prompt's blocks the chosen
worker does not hold on its device enter the index as predicted there, so the
requests of the same prefix that come before the worker's events do find it;
the events confirm or drop them (router/kv_index.py).

The response says the decision: `x-rotor-kv-overlap` the chosen worker's
overlap in blocks (an integer), `x-rotor-kv-tiers` where they sit
(`device=8,host=3,disk=1,predicted=0`).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rotor.protocol.engine import EngineRequest
from rotor.protocol.kv import block_hashes, chain_root
from rotor.protocol.lease import Lease
from rotor.router.kv_cost import KVCost, WorkerId, WorkerLoad
from rotor.router.kv_index import ApproxKVIndex, KVIndex, Overlap
from rotor.router.modes import LocalLoad, Pick

log = logging.getLogger("rotor.router.kv")


@dataclass
class KVStats:
    """What /metrics says about KV routing: blocks asked and found, per worker,
    and the blocks found by where they sat, per (worker, medium)."""

    prompt_blocks: collections.Counter[str] = field(default_factory=collections.Counter)
    overlap_blocks: collections.Counter[str] = field(default_factory=collections.Counter)
    hits: collections.Counter[str] = field(default_factory=collections.Counter)
    tier_blocks: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)

    def count(self, worker: str, prompt_blocks: int, tiers: Overlap) -> None:
        """One decision: `prompt_blocks` routed to `worker`, which held `tiers`."""
        self.prompt_blocks[worker] += prompt_blocks
        overlap = tiers.blocks
        self.overlap_blocks[worker] += overlap
        if overlap:
            self.hits[worker] += 1
            for medium, n in (
                ("device", tiers.device),
                ("host", tiers.host),
                ("disk", tiers.disk),
                ("predicted", tiers.predicted),
            ):
                if n:
                    self.tier_blocks[(worker, medium)] += n


class KVRouter:
    def __init__(
        self,
        block_size: int,
        cost: KVCost,
        approx_ttl: float | None = None,
        predicted_ttl: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`approx_ttl`: no KV events, record decisions (for that long);
        `predicted_ttl`: with events, how long a decision's blocks count as
        predicted on its worker before its events confirm them (0: not at
        all). `clock` times both."""
        self.block_size = block_size
        self.cost = cost
        self.index: KVIndex | None = (
            None if approx_ttl is not None else KVIndex(block_size, predicted_ttl, clock)
        )
        self.approx = ApproxKVIndex(approx_ttl, clock) if approx_ttl is not None else None
        self.stats = KVStats()

    def overlaps(self, hashes: list[int]) -> dict[WorkerId, int]:
        """Each worker's leading blocks of the prompt held (by its events, or
        by this frontend's own record without them)."""
        return {w: o.blocks for w, o in self.matches(hashes).items()}

    def matches(self, hashes: list[int]) -> dict[WorkerId, Overlap]:
        """Each worker's leading blocks of the prompt, by where each sits."""
        if self.approx is not None:
            return self.approx.matches(hashes)
        assert self.index is not None
        return self.index.matches(hashes)

    def choose(self, workers: list[Lease], request: EngineRequest, load: LocalLoad) -> Pick:
        root = chain_root(request.lora, request.cache_salt)
        hashes = block_hashes(request.token_ids, self.block_size, root, request.images)
        loads: dict[WorkerId, WorkerLoad] = {w.worker_id: self._load(w, load) for w in workers}
        ranking = self.cost.choose(len(hashes), self.matches(hashes), loads)
        worker = str(ranking.worker)
        chosen = ranking.chosen
        if self.approx is not None:
            self.approx.record(worker, hashes)
        elif self.index is not None:
            self.index.predict(worker, hashes)
        self.stats.count(worker, len(hashes), chosen.tiers)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("request %s: %s", request.request_id, ranking.log_line())
        # What the worker must compute, or bring up from a lower medium (at
        # the share of a block its weight does not save): the prompt less the
        # credited blocks, in tokens.
        credited = round(self.cost.credit(chosen.tiers) * self.block_size)
        return Pick(
            worker,
            {
                "x-rotor-worker": worker,
                "x-rotor-kv-overlap": ranking.header,
                "x-rotor-kv-tiers": ranking.tiers_header,
            },
            prefill_tokens=max(0, len(request.token_ids) - credited),
        )

    def _load(self, lease: Lease, local: LocalLoad) -> WorkerLoad:
        """The load the worker published, plus the prefill this frontend sent
        it that has not started yet."""
        state = lease.state
        return WorkerLoad(
            active_decode_blocks=state.kv_blocks_total - state.kv_blocks_free,
            pending_prefill_tokens=state.pending_prefill_tokens + local.prefilling[lease.worker_id],
            queue_length=state.waiting,
        )

    def remove_worker(self, worker: str) -> None:
        if self.index is not None:
            self.index.remove_worker(worker)
        if self.approx is not None:
            self.approx.remove_worker(worker)
