"""The mocker's side of a KV handover between a prefill and a decode worker.

As a prefill engine, the mocker keeps a `PREFILL_ONLY` prompt's full blocks
pinned under a transfer id (`Holds`) until a decode worker fetches them, the
frontend says nobody will, or the hold times out; expiry is checked whenever
the engine is asked about its state or steps, so an idle worker still frees
them by its next load report (every second). As a decode engine it asks the
prefill worker for the blocks it lacks (`missing`), waits out the transfer's
simulated time (`transfer_seconds`) and stores them as if computed here.
The KV data itself is simulated: what moves between the two workers is the
request and its acknowledgement (the block hashes handed over).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from rotor.engines.mocker.kv_cache import KVCache
from rotor.protocol.kv import block_hashes


@dataclass(slots=True)
class Hold:
    block_ids: list[int]
    hashes: list[int]
    deadline: float


class Holds:
    """Pinned transfers by id, each released once (fetched, dropped, expired)."""

    def __init__(
        self, kv: KVCache, timeout_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kv = kv
        self.timeout_s = timeout_s  # 0: held until fetched or dropped
        self.clock = clock
        self._holds: dict[str, Hold] = {}
        self.timeouts = 0

    @property
    def num_pinned(self) -> int:
        return sum(len(h.block_ids) for h in self._holds.values())

    def pin(self, block_ids: list[int], hashes: list[int]) -> str:
        """Pin these blocks for a decode worker; the transfer id that names them."""
        self.expire()
        transfer_id = uuid.uuid4().hex
        self.kv.pin(block_ids)
        deadline = self.clock() + self.timeout_s if self.timeout_s > 0 else float("inf")
        self._holds[transfer_id] = Hold(list(block_ids), list(hashes), deadline)
        return transfer_id

    def release(self, transfer_id: str, wanted: list[int]) -> list[int]:
        """Hand over those of the transfer's blocks that are `wanted` and end
        the hold (any fetch ends it; `wanted` empty: nobody will fetch)."""
        self.expire()
        hold = self._holds.pop(transfer_id, None)
        if hold is None:
            return []  # unknown, already fetched, or expired
        self.kv.unpin(hold.block_ids)
        asked = set(wanted)
        return [h for h in hold.hashes if h in asked]

    def expire(self) -> None:
        now = self.clock()
        for transfer_id in [t for t, h in self._holds.items() if h.deadline <= now]:
            self.kv.unpin(self._holds.pop(transfer_id).block_ids)
            self.timeouts += 1


def missing(
    kv: KVCache, prompt: list[int], offered: list[int], root: int | None = None
) -> tuple[int, list[int]] | None:
    """Which of a prefill's `offered` block hashes this cache lacks: (the index
    of the first one lacking, those from there on). None when the offer is not
    this prompt's blocks (another block size, another prompt)."""
    own = block_hashes(prompt[: len(offered) * kv.block_size], kv.block_size, root)
    if own != offered:
        return None
    held = kv.hash_to_block
    first = next((i for i, h in enumerate(own) if h not in held), len(own))
    return first, own[first:]


def leading(asked: list[int], granted: list[int]) -> int:
    """How many of the `asked` hashes, from the first on, were `granted`: the
    blocks a prompt can use (a block after a gap is of no use to it)."""
    given = set(granted)
    return next((i for i, h in enumerate(asked) if h not in given), len(asked))


def transfer_seconds(tokens: int, bytes_per_token: int, gb_per_s: float, speedup: float) -> float:
    """Simulated time of moving `tokens` tokens' KV: bytes over bandwidth,
    divided by the speedup ratio (bandwidth 0: instant; speedup 0: no waiting)."""
    if tokens <= 0 or gb_per_s <= 0 or speedup <= 0:
        return 0.0
    return tokens * bytes_per_token / (gb_per_s * 1e9) / speedup
