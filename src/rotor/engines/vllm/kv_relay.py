"""vLLM's KV cache events, relayed as rotor's (`rotor.protocol.kv`).

vLLM publishes `KVEventBatch`es on a ZMQ PUB socket (its `KVEventsConfig`):
`BlockStored` (vLLM's block hashes, their parent, and the blocks' token ids),
`BlockRemoved` (vLLM hashes) and `AllBlocksCleared`. A router keys blocks by
rotor's hash, so the relay computes rotor's chained hash from each stored
block's token ids and its parent's rotor hash, and remembers vLLM hash →
rotor hash so removals can be named too. The relay keeps the findable set
itself, so it can hand out a `KVSnapshot` at any time, exactly like the
mocker's cache does; its `event_id`s count its own events from 1.

Media: each event names where its blocks sit (`medium`): the GPU's own cache
(`GPU`, or None from engines that predate media), or a tier below it that a
KV connector offloads to: vLLM's offloading connector and its simple CPU
one say `CPU` and `STORAGE`, Mooncake's store `cpu`. They are relayed as
rotor's `device`, `host` and `disk` (`MEDIA_OF`, case aside); an event of any
other medium is dropped (a debug line says which). The relay keeps one set
per medium: a block may sit on several at once (the offloading connector
keeps its CPU copy when it loads a block back to the GPU), and a block
offloaded to the CPU is a `BlocksStored` of `host` while the GPU still
holds it; the GPU's eviction is then its `BlocksRemoved` of `device`.
vLLM's `AllBlocksCleared` (a reset of the GPU's prefix cache) clears the
device alone: it is relayed as `AllCleared` while nothing sits below, and as
a `BlocksRemoved` of every device block otherwise, since the tiers below
keep theirs.

The offloading connector names blocks as the GPU does. With its
`self_describing_kv_events` (rotor asks for it: args.py) a store carries
its chunk's token ids and parent, so its blocks are hashed like the GPU's;
without it a store carries only the chunk's last vLLM hash (no tokens, block
size 0), which the relay can name only while it knows that hash from
another medium (the GPU's copy, stored before it was offloaded).

A block stored for a request with a LoRA adapter (the event's `lora_name`,
or its `lora_id`, which the engine's lookup names) chains from the adapter's
root (`lora_root`), as the mocker's do; its event still names no parent.
A first block stored for a request with a `cache_salt` carries the salt
among its extra keys (vLLM hashes it into that block), and chains from the
salted root (`chain_root`), so the router's hashes and the relay's agree.

A block that holds an image's tokens carries, among its extra keys, one
(identifier, offset) pair per image it overlaps: the image's identifier
(rotor sends the content hash as its `multi_modal_uuids`; vLLM prefixes it
with `ADAPTER:` when it runs a LoRA adapter on the vision tower, stripped
here) and where the image starts relative to the block. rotor hashes such a
block with the same pairs (`image_key`), so its name is the one the router
and the mocker give it (protocol/kv.py).

vLLM may hold two physical blocks with one hash (it stores both, then
removes both), and a chunk of the offloading connector may announce a hash
again; rotor's findable set has the hash once per medium, so a hash is
stored on its first copy there and removed with its last.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rotor.engines.kv_chains import Pair, parents_first
from rotor.protocol.kv import (
    MEDIA,
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KVEvent,
    KVSnapshot,
    Medium,
    block_hash,
    chain_root,
    image_key,
)
from rotor.protocol.kv import block_hashes as rotor_hashes

logger = logging.getLogger(__name__)

KVListener = Callable[[KVEvent], None]
# vLLM's int id of a LoRA adapter -> its name (None: not one the engine knows)
LoraNames = Callable[[int], str | None]

# vLLM's media (kv_events.MEDIUM_*, and what its connectors write), upper-cased,
# as rotor's; an event without one is the GPU's own cache.
MEDIA_OF: dict[str, Medium] = {"GPU": "device", "CPU": "host", "STORAGE": "disk", "DISK": "disk"}


@dataclass(slots=True)
class _Name:
    """A vLLM block as rotor names it, while some medium holds it."""

    rotor_hash: int
    rotor_parent: int | None


class KVRelay:
    """Turns vLLM's KV events into rotor's, keeping the findable set per medium."""

    def __init__(self, block_size: int, lora_names: LoraNames | None = None) -> None:
        self.block_size = block_size
        self.lora_names = lora_names
        self.listener: KVListener | None = None
        self.event_id = 0
        self.lost = 0  # vLLM batches missed (a gap in its sequence numbers)
        self.dropped = 0  # events of a medium rotor does not know
        self._names: dict[Any, _Name] = {}  # vLLM hash -> rotor's, held on some medium
        # each medium's vLLM hashes and their copies, in the order they came
        self._held: dict[Medium, dict[Any, int]] = {m: {} for m in MEDIA}

    @property
    def num_cached(self) -> int:
        """Blocks the device holds."""
        return len(self._held["device"])

    def num_held(self, medium: Medium) -> int:
        return len(self._held[medium])

    def snapshot(self) -> KVSnapshot:
        """The findable set as (rotor hash, rotor parent), parents first, per
        medium: the device's in `blocks`, those below in `lower` (the media
        vLLM has used)."""
        lists: dict[str, list[Pair]] = {}
        for medium, held in self._held.items():
            names = (self._names[h] for h in held)
            lists[medium] = parents_first({n.rotor_hash: n.rotor_parent for n in names})
        device = lists.pop("device")
        lower = {m: pairs for m, pairs in lists.items() if pairs}
        return KVSnapshot(self.event_id, self.block_size, device, lower)

    def _emit(self, make: Callable[[int], KVEvent]) -> None:
        self.event_id += 1
        if self.listener is not None:
            self.listener(make(self.event_id))

    # -- vLLM's events ------------------------------------------------------

    def apply(self, event: Any) -> None:
        """One vLLM event (BlockStored / BlockRemoved / AllBlocksCleared)."""
        kind = type(event).__name__
        if kind == "BlockStored":
            medium = self._medium(event)
            if medium is not None:
                self._stored(event, medium)
        elif kind == "BlockRemoved":
            medium = self._medium(event)
            if medium is not None:
                self._removed(event.block_hashes, medium)
        elif kind == "AllBlocksCleared":
            self._cleared()

    def _medium(self, event: Any) -> Medium | None:
        """Where the event's blocks sit, as rotor says it; None (dropped) for
        a medium rotor does not know."""
        name = getattr(event, "medium", None)
        if name is None:
            return "device"
        medium = MEDIA_OF.get(str(name).upper())
        if medium is None:
            self.dropped += 1
            logger.debug(
                "KV relay: a %s of medium %r dropped (rotor knows %s)",
                type(event).__name__,
                name,
                ", ".join(MEDIA_OF),
            )
        return medium

    def _stored(self, event: Any, medium: Medium) -> None:
        if not event.token_ids:
            self._stored_by_name(event, medium)
            return
        size = event.block_size
        vllm_parent = event.parent_block_hash
        parent_name = self._names.get(vllm_parent) if vllm_parent is not None else None
        if vllm_parent is not None and parent_name is None:
            # The parent's event was lost (or it is held nowhere any more):
            # these blocks cannot be named by prefix, so they are not relayed.
            logger.warning("KV relay: a stored block's parent is unknown; dropped")
            return
        parent = parent_name.rotor_hash if parent_name else None
        chain = parent
        if parent_name is None:  # a first block: the root of its adapter and salt
            try:
                chain = chain_root(self._lora(event), _salt(event))
            except LookupError:
                logger.warning("KV relay: a stored block's LoRA adapter is unknown; dropped")
                return
        images = _image_keys(event, len(event.block_hashes))
        if images is None:
            ours = rotor_hashes(event.token_ids, size, chain)
        else:
            ours = []
            for i, extra in enumerate(images):
                chain = block_hash(chain, event.token_ids[i * size : (i + 1) * size], extra)
                ours.append(chain)
        pairs: list[tuple[Any, _Name]] = []
        for vllm_hash, rotor_hash in zip(event.block_hashes, ours, strict=False):
            pairs.append((vllm_hash, _Name(rotor_hash, parent)))
            parent = rotor_hash
        self._store(pairs, medium, size)

    def _stored_by_name(self, event: Any, medium: Medium) -> None:
        """A store that carries no token ids (the offloading connector's
        without self-describing events): blocks named while another medium
        holds them; the others cannot be named, and are not relayed."""
        pairs = [(h, self._names.get(h)) for h in event.block_hashes]
        known = [(h, name) for h, name in pairs if name is not None]
        if len(known) < len(pairs):
            logger.debug(
                "KV relay: %d blocks stored on %s without token ids, unknown here; dropped",
                len(pairs) - len(known),
                medium,
            )
        self._store(known, medium, self.block_size)

    def _store(self, pairs: list[tuple[Any, _Name]], medium: Medium, size: int) -> None:
        """Hold each block on `medium` (one copy more); each unbroken run of
        blocks new there is one stored event, chained as named."""
        held = self._held[medium]
        run: list[int] = []
        run_parent: int | None = None
        for vllm_hash, name in pairs:
            copies = held.get(vllm_hash)
            if copies is not None:
                held[vllm_hash] = copies + 1
            else:
                name = self._names.setdefault(vllm_hash, name)
                held[vllm_hash] = 1
                if run and name.rotor_parent == run[-1]:
                    run.append(name.rotor_hash)
                    continue
                if run:
                    self._store_run(run, run_parent, size, medium)
                run, run_parent = [name.rotor_hash], name.rotor_parent
                continue
            if run:
                self._store_run(run, run_parent, size, medium)
                run = []
        if run:
            self._store_run(run, run_parent, size, medium)

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

    def _store_run(self, run: list[int], parent: int | None, size: int, medium: Medium) -> None:
        chain = list(run)
        self._emit(lambda i: BlocksStored(i, chain, parent, size, medium))

    def _removed(self, hashes: list[Any], medium: Medium) -> None:
        held = self._held[medium]
        gone: list[int] = []
        for vllm_hash in hashes:
            copies = held.get(vllm_hash)
            if copies is None:
                continue
            if copies > 1:
                held[vllm_hash] = copies - 1
                continue
            del held[vllm_hash]
            gone.append(self._names[vllm_hash].rotor_hash)
            self._forget(vllm_hash)
        if gone:
            self._emit(lambda i: BlocksRemoved(i, gone, medium))

    def _forget(self, vllm_hash: Any) -> None:
        """Its name goes once no medium holds it."""
        if not any(vllm_hash in held for held in self._held.values()):
            del self._names[vllm_hash]

    def _cleared(self) -> None:
        """vLLM's GPU cache was reset: the device's blocks go, the media below keep theirs."""
        device = self._held["device"]
        if not any(self._held[m] for m in MEDIA if m != "device"):
            device.clear()
            self._names.clear()
            self._emit(AllCleared)
            return
        gone = [self._names[h].rotor_hash for h in device]
        hashes = list(device)
        device.clear()
        for vllm_hash in hashes:
            self._forget(vllm_hash)
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


def _image_keys(event: Any, blocks: int) -> list[bytes] | None:
    """Each block's images as rotor hashes them (`image_key`s joined, b"" for a
    block without one), from the (identifier, offset) pairs among its extra
    keys; None when no block holds an image's tokens."""
    keys = getattr(event, "extra_keys", None)
    if not keys:
        return None
    lora = getattr(event, "lora_name", None)
    prefix = f"{lora}:" if isinstance(lora, str) and lora else None
    out: list[bytes] = []
    found = False
    for i in range(blocks):
        block = keys[i] if i < len(keys) else None
        extra = b""
        for key in block or ():
            if (
                isinstance(key, list | tuple)
                and len(key) == 2
                and isinstance(key[0], str)
                and isinstance(key[1], int)
            ):
                identifier = key[0]
                if prefix is not None and identifier.startswith(prefix):
                    identifier = identifier[len(prefix) :]
                extra += image_key(identifier, key[1])
                found = True
        out.append(extra)
    return out if found else None


def _salt(event: Any) -> str | None:
    """The cache_salt of the request whose first block the event stores.
    vLLM publishes a block's extra keys untagged, in order: the adapter's
    name (with an adapter), (mm id, offset) pairs, the salt (first block
    only), prompt-embeds digests (bytes); so the salt is the first string
    after the adapter's name."""
    keys = getattr(event, "extra_keys", None)
    if not keys or not keys[0]:
        return None
    strings = [k for k in keys[0] if isinstance(k, str)]
    if getattr(event, "lora_name", None) or getattr(event, "lora_id", None) is not None:
        strings = strings[1:]
    return strings[0] if strings else None
