"""`--router kv`: send each request to the worker whose KV cache already
holds the longest prefix of its prompt, weighed against load.

The prompt's blocks are hashed once per decision (protocol/kv's specified
hash, at the engine's block size); `KVIndex` says how many leading blocks each
worker holds (from its events), or `ApproxKVIndex` what this frontend routed
where recently (`--no-kv-events`); `KVCost` decides, from the load workers
publish plus the prefill this frontend has sent that has not started yet.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field

from rotor.protocol.engine import EngineRequest
from rotor.protocol.kv import block_hashes, lora_root
from rotor.protocol.lease import Lease
from rotor.router.kv_cost import KVCost, WorkerId, WorkerLoad
from rotor.router.kv_index import ApproxKVIndex, KVIndex
from rotor.router.modes import LocalLoad, Pick

log = logging.getLogger("rotor.router.kv")


@dataclass
class KVStats:
    """What /metrics says about KV routing: blocks asked and found, per worker."""

    prompt_blocks: collections.Counter[str] = field(default_factory=collections.Counter)
    overlap_blocks: collections.Counter[str] = field(default_factory=collections.Counter)
    hits: collections.Counter[str] = field(default_factory=collections.Counter)


class KVRouter:
    def __init__(self, block_size: int, cost: KVCost, approx_ttl: float | None = None) -> None:
        """`approx_ttl`: no KV events, record decisions."""
        self.block_size = block_size
        self.cost = cost
        self.index: KVIndex | None = None if approx_ttl is not None else KVIndex(block_size)
        self.approx = ApproxKVIndex(approx_ttl) if approx_ttl is not None else None
        self.stats = KVStats()

    def overlaps(self, hashes: list[int]) -> dict[WorkerId, int]:
        """Each worker's leading blocks of the prompt held (by its events, or
        by this frontend's own record without them)."""
        if self.approx is not None:
            return self.approx.overlaps(hashes)
        assert self.index is not None
        return self.index.overlaps(hashes)

    def choose(self, workers: list[Lease], request: EngineRequest, load: LocalLoad) -> Pick:
        hashes = block_hashes(request.token_ids, self.block_size, lora_root(request.lora))
        loads: dict[WorkerId, WorkerLoad] = {w.worker_id: self._load(w, load) for w in workers}
        ranking = self.cost.choose(len(hashes), self.overlaps(hashes), loads)
        worker = str(ranking.worker)
        overlap = ranking.overlap_blocks
        if self.approx is not None:
            self.approx.record(worker, hashes)
        stats = self.stats
        stats.prompt_blocks[worker] += len(hashes)
        stats.overlap_blocks[worker] += overlap
        if overlap:
            stats.hits[worker] += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("request %s: %s", request.request_id, ranking.log_line())
        return Pick(
            worker,
            {"x-rotor-worker": worker, "x-rotor-kv-overlap": ranking.header},
            prefill_tokens=max(0, len(request.token_ids) - overlap * self.block_size),
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
