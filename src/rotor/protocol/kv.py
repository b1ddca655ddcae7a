"""KV block identity and KV cache events: what workers tell routers about their caches.

Block hash (the one definition for the whole system)
-----------------------------------------------------
A sequence of token ids is cut into blocks of `block_size` tokens; only full
blocks have a hash. Block i's hash is

    h_i = XXH3_64(seed=SEED, data=le_u64(h_{i-1}) + le_u32(t_0) + ... + le_u32(t_{k-1}))

where `t_0 .. t_{k-1}` are the block's token ids, `le_u32` is the 4-byte
little-endian encoding of an unsigned 32-bit integer (token ids must lie in
[0, 2**32)), `le_u64` the 8-byte little-endian encoding of the parent's
hash, and the root block's parent is 0 (the data always starts with 8 bytes).
So a block of k tokens hashes exactly 8 + 4k bytes, and a block's hash names
its whole prefix: equal hashes mean equal token prefixes (up to 2**-64).

A sequence generated with a LoRA adapter chains its root block in the
adapter's root instead of 0:

    root(name) = XXH3_64(seed=SEED, data=b"lora:" + utf8(name))

so an adapter's blocks never share a hash with the base model's or another
adapter's (their KV differs: the adapter changes the attention projections),
and a KV router never sends a prefix to a worker whose cache holds it for
another adapter.
A request with a `cache_salt` (a tenant's) chains its root block in a root
made of the salt and the root it would have had without one:

    root(lora, salt) = XXH3_64(seed=SALT_SEED, data=le_u64(root(lora)) + utf8(salt))

(root(lora) is 0 for the base model), so requests with different salts, or
with a salt and without, never share a block hash, in the router's index or
in the mocker's prefix cache, while two requests with one salt (and adapter)
do. A request without a salt hashes as before. SALT_SEED differs from SEED, so
no block or adapter name whose bytes equal a salted root's data hashes to it
(XXH3 is no cryptographic hash: the isolation is of caches, not of secrets). vLLM does the same in its own
hashes: the salt is an extra key of a sequence's first block.
KV events still name a sequence's first block with no parent (None): the
root is part of its hash, not a block of its own.

A block that holds any of an image's tokens (protocol/engine.EngineImage: the
span `[offset, offset + length)` of the prompt) also hashes that image's
identity and where the image starts relative to the block, vLLM's extra keys
("mm", identifier, offset - block start):

    h_i = XXH3_64(seed=SEED, data=le_u64(h_{i-1}) + le_u32(t_0) + ... + le_u32(t_{k-1})
                  + for each image overlapping the block, in prompt order:
                    b"\x00mm" + utf8(content_hash) + le_i64(offset - block start))

The placeholder tokens of two different images are equal, so without this a
different image behind the same text would hit the first image's blocks. The
identity is the image's content hash (SHA-256 of its bytes), so the same image
sent as a `data:` URL and fetched from a URL hashes the same; the relative
offset is the one vLLM's events carry, so the router can name vLLM's blocks
from its events alone (engines/vllm/kv_relay.py). A block with no image's
tokens hashes exactly as before.

SEED = 0x726F746F72 (= 491496173426, the ASCII bytes of "rotor" read as a
big-endian integer). XXH3-64 is the 64-bit XXH3 of the `xxhash` package
(`xxhash.xxh3_64_intdigest`), version-stable by its own specification, so
every process, machine and Python version computes the same hashes (unlike
Python's `hash()`, which is salted per process).

KV events
---------
An engine's cache emits `BlocksStored` when blocks become findable by hash,
`BlocksRemoved` when they stop being findable, and `AllCleared` when every
registration is dropped. `event_id` increases by one per event of one cache
(from 1), so a consumer sees a gap as a lost event and resyncs from a
`KVSnapshot`: the (hash, parent) pairs the cache holds, parents first, as of
the snapshot's `event_id`.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import xxhash

SEED = 0x726F746F72
SALT_SEED = SEED + 1  # a cache_salt's root: its own domain (see above)
ROOT_PARENT = 0  # the parent hash the root block chains in

_xxh3 = xxhash.xxh3_64_intdigest
_BIG_ENDIAN = sys.byteorder == "big"
assert array("I").itemsize == 4, "array('I') must hold 32-bit items"


def _le_u32(tokens: Iterable[int]) -> bytes:
    """The tokens as little-endian u32, or ValueError naming the bad input."""
    try:
        packed = array("I", tokens)
    except (OverflowError, TypeError):
        raise ValueError("token ids must be integers in [0, 2**32)") from None
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def _le_u64(parent: int | None) -> bytes:
    if parent is None:
        parent = ROOT_PARENT
    try:
        return parent.to_bytes(8, "little")
    except (OverflowError, AttributeError):
        raise ValueError(
            f"a parent hash must be an integer in [0, 2**64), got {parent!r}"
        ) from None


def lora_root(lora: str | None) -> int | None:
    """The parent of a sequence's first block: None (0) for the base model,
    the adapter's root for a LoRA adapter's."""
    return None if lora is None else _xxh3(b"lora:" + lora.encode(), seed=SEED)


def chain_root(lora: str | None = None, cache_salt: str | None = None) -> int | None:
    """The parent of a request's first block: its adapter's root (`lora_root`),
    salted by its `cache_salt`, so that tenants with different salts share no
    block; None (0) for the base model without a salt."""
    root = lora_root(lora)
    if cache_salt is None:
        return root
    return _xxh3(_le_u64(root) + cache_salt.encode(), seed=SALT_SEED)


class Placed(Protocol):
    """An image's place in a prompt, as block hashes read it (EngineImage is one)."""

    @property
    def content_hash(self) -> str: ...
    @property
    def offset(self) -> int: ...
    @property
    def length(self) -> int: ...


def image_key(identity: str, offset: int) -> bytes:
    """An image's bytes in the hash of a block it overlaps: its identity and
    its start relative to the block's first token (negative: it began earlier)."""
    return b"\x00mm" + identity.encode() + offset.to_bytes(8, "little", signed=True)


def block_hash(parent: int | None, tokens: Iterable[int], extra: bytes = b"") -> int:
    """The hash of one block of `tokens` whose parent block hashed to `parent`
    (None for the first block of a sequence); `extra`: its images' keys (image_key)."""
    return _xxh3(_le_u64(parent) + _le_u32(tokens) + extra, seed=SEED)


def block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    parent: int | None = None,
    images: Sequence[Placed] = (),
    start: int = 0,
) -> list[int]:
    """The chained hashes of every full block of `token_ids` (a trailing partial
    block has none); `parent` is the hash of the block before the first one.
    `images` are the whole prompt's, placed in its coordinates; `start` is where
    `token_ids` begins in the prompt (a multiple of `block_size`)."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    full = len(token_ids) // block_size
    raw = _le_u32(token_ids[: full * block_size])
    step = 4 * block_size
    hashes: list[int] = []
    h = _le_u64(parent)
    if not images:
        for at in range(0, full * step, step):
            value = _xxh3(h + raw[at : at + step], seed=SEED)
            hashes.append(value)
            h = value.to_bytes(8, "little")
        return hashes
    for i in range(full):
        first = start + i * block_size
        extra = b"".join(
            image_key(image.content_hash, image.offset - first)
            for image in images
            if image.offset < first + block_size and image.offset + image.length > first
        )
        value = _xxh3(h + raw[i * step : (i + 1) * step] + extra, seed=SEED)
        hashes.append(value)
        h = value.to_bytes(8, "little")
    return hashes


# Where a cached block sits: in the device's memory, or offloaded below it to
# the host's memory or to disk (vLLM's offloading, SGLang's HiCache, the
# mocker's tiers), from which it is brought back at a cost. A block may sit in
# several at once (offloading copies it down before the device evicts it).
Medium = Literal["device", "host", "disk"]
MEDIA: tuple[Medium, ...] = ("device", "host", "disk")


@dataclass(slots=True)
class BlocksStored:
    """Blocks that became findable by hash on `medium`: `block_hashes` is one
    chain, each block the parent of the next; `parent_hash` is the first
    one's parent (None: it is a sequence's first block)."""

    event_id: int
    block_hashes: list[int]
    parent_hash: int | None = None
    block_size: int = 0  # tokens per block, so a consumer can check it hashes alike
    medium: Medium = "device"


@dataclass(slots=True)
class BlocksRemoved:
    """Blocks that are no longer findable by hash on `medium` (evicted,
    moved down, or dropped)."""

    event_id: int
    block_hashes: list[int]
    medium: Medium = "device"


@dataclass(slots=True)
class AllCleared:
    """Every block registration of the cache was dropped, on every medium."""

    event_id: int


KVEvent = BlocksStored | BlocksRemoved | AllCleared


@dataclass(slots=True)
class KVSnapshot:
    """What a cache holds as of `event_id` (its last event; 0 before any): each
    registered block as (hash, parent hash or None), a parent before its
    children whenever the parent is itself held. Replaying each pair as a
    stored block rebuilds the cache's findable set; events after `event_id`
    then apply on top."""

    event_id: int
    block_size: int
    blocks: list[tuple[int, int | None]] = field(default_factory=list)  # on the device
    # the blocks of each lower medium ("host", "disk"), as `blocks` are
    lower: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)
