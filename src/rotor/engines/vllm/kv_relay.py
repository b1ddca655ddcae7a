"""vLLM's KV cache events, relayed as rotor's (`rotor.protocol.kv`).

vLLM publishes `KVEventBatch`es on a ZMQ PUB socket (its `KVEventsConfig`):
`BlockStored` (vLLM's block hashes, their parent, and the blocks' token ids),
`BlockRemoved` (vLLM hashes) and `AllBlocksCleared`. A router keys blocks by
rotor's hash, so the relay computes rotor's chained hash from each stored
block's token ids and its parent's rotor hash, and remembers vLLM hash →
rotor hash so removals can be named too. The relay keeps the findable set
itself, so it can hand out a `KVSnapshot` at any time, exactly like the
mocker's cache does; its `event_id`s count its own events from 1.

A block stored for a request with a LoRA adapter (the event's `lora_name`,
or its `lora_id`, which the engine's lookup names) chains from the adapter's
root (`lora_root`), as the mocker's do; its event still names no parent.

vLLM may hold two physical blocks with one hash (it stores both, then
removes both); rotor's findable set has the hash once, so a hash is stored on
its first copy and removed with its last.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rotor.protocol.kv import (
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KVEvent,
    KVSnapshot,
    lora_root,
)
from rotor.protocol.kv import block_hashes as rotor_hashes

logger = logging.getLogger(__name__)

KVListener = Callable[[KVEvent], None]
# vLLM's int id of a LoRA adapter -> its name (None: not one the engine knows)
LoraNames = Callable[[int], str | None]


@dataclass(slots=True)
class _Block:
    rotor_hash: int
    parent: Any  # vLLM hash of the parent block, or None
    copies: int = 1


class KVRelay:
    """Turns vLLM's KV events into rotor's, keeping the findable set."""

    def __init__(self, block_size: int, lora_names: LoraNames | None = None) -> None:
        self.block_size = block_size
        self.lora_names = lora_names
        self.listener: KVListener | None = None
        self.event_id = 0
        self.lost = 0  # vLLM batches missed (a gap in its sequence numbers)
        self._blocks: dict[Any, _Block] = {}  # by vLLM hash, in insertion order

    @property
    def num_cached(self) -> int:
        return len(self._blocks)

    def snapshot(self) -> KVSnapshot:
        """The findable set as (rotor hash, rotor parent), parents first (a
        parent is always stored before its children, and dicts keep order)."""
        pairs: list[tuple[int, int | None]] = []
        for block in self._blocks.values():
            parent = self._blocks.get(block.parent) if block.parent is not None else None
            pairs.append((block.rotor_hash, parent.rotor_hash if parent else None))
        return KVSnapshot(self.event_id, self.block_size, pairs)

    def _emit(self, make: Callable[[int], KVEvent]) -> None:
        self.event_id += 1
        if self.listener is not None:
            self.listener(make(self.event_id))

    # -- vLLM's events ------------------------------------------------------

    def apply(self, event: Any) -> None:
        """One vLLM event (BlockStored / BlockRemoved / AllBlocksCleared)."""
        kind = type(event).__name__
        if kind == "BlockStored":
            self._stored(event)
        elif kind == "BlockRemoved":
            self._removed(event.block_hashes)
        elif kind == "AllBlocksCleared":
            self._blocks.clear()
            self._emit(AllCleared)

    def _stored(self, event: Any) -> None:
        if getattr(event, "medium", None) not in (None, "GPU"):
            return  # an offloaded copy (CPU / storage tier) is not this cache
        size = event.block_size
        vllm_parent = event.parent_block_hash
        parent_block = self._blocks.get(vllm_parent) if vllm_parent is not None else None
        if vllm_parent is not None and parent_block is None:
            # The parent's event was lost (or evicted first): these blocks
            # cannot be named by prefix, so they are not relayed.
            logger.warning("KV relay: a stored block's parent is unknown; dropped")
            return
        parent = parent_block.rotor_hash if parent_block else None
        chain = parent
        if parent_block is None:  # a first block: the base model's root, or its adapter's
            try:
                chain = lora_root(self._lora(event))
            except LookupError:
                logger.warning("KV relay: a stored block's LoRA adapter is unknown; dropped")
                return
        ours = rotor_hashes(event.token_ids, size, chain)
        run: list[int] = []
        run_parent = parent
        prev_vllm = vllm_parent
        for vllm_hash, rotor_hash in zip(event.block_hashes, ours, strict=False):
            held = self._blocks.get(vllm_hash)
            if held is not None:
                held.copies += 1
                if run:
                    self._store_run(run, run_parent, size)
                run, run_parent = [], held.rotor_hash
            else:
                self._blocks[vllm_hash] = _Block(rotor_hash, prev_vllm)
                run.append(rotor_hash)
            prev_vllm = vllm_hash
        if run:
            self._store_run(run, run_parent, size)

    def _lora(self, event: Any) -> str | None:
        """The adapter the event's blocks were computed with (None: the base
        model); LookupError for an adapter id nobody can name."""
        name = getattr(event, "lora_name", None)
        if isinstance(name, str) and name:
            return name
        lora_id = getattr(event, "lora_id", None)
        if lora_id is None:
            return None
        named = self.lora_names(lora_id) if self.lora_names is not None else None
        if named is None:
            raise LookupError(lora_id)
        return named

    def _store_run(self, run: list[int], parent: int | None, size: int) -> None:
        chain = list(run)
        self._emit(lambda i: BlocksStored(i, chain, parent, size))

    def _removed(self, hashes: list[Any]) -> None:
        gone: list[int] = []
        for vllm_hash in hashes:
            block = self._blocks.get(vllm_hash)
            if block is None:
                continue
            block.copies -= 1
            if block.copies == 0:
                del self._blocks[vllm_hash]
                gone.append(block.rotor_hash)
        if gone:
            self._emit(lambda i: BlocksRemoved(i, gone))


def listen(host: str = "127.0.0.1") -> tuple[Any, str]:
    """A SUB socket bound to a free loopback port, and its endpoint. vLLM's
    publisher connects to a `tcp://HOST:PORT` endpoint (it binds only
    wildcards), so rotor binds before vLLM starts and no event is sent
    before the two are connected."""
    import zmq
    import zmq.asyncio

    sock = zmq.asyncio.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    port = sock.bind_to_random_port(f"tcp://{host}")
    return sock, f"tcp://{host}:{port}"


async def relay_events(sock: Any, relay: KVRelay) -> None:
    """Read vLLM's event batches from `sock` forever, feeding `relay`."""
    import msgspec
    from vllm.distributed.kv_events import KVEventBatch

    decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
    expected: int | None = None
    try:
        while True:
            _topic, seq_bytes, payload = await sock.recv_multipart()
            seq = int.from_bytes(seq_bytes, "big")
            if expected is not None and seq != expected:
                relay.lost += seq - expected
                logger.warning("KV relay: %d vLLM event batches lost", seq - expected)
            expected = seq + 1
            try:
                batch = decoder.decode(payload)
            except msgspec.DecodeError:
                logger.exception("KV relay: an undecodable vLLM event batch")
                continue
            for event in batch.events:
                relay.apply(event)
    finally:
        with contextlib.suppress(Exception):
            sock.close(linger=0)
