"""A paged KV cache with prefix reuse, as vLLM keeps it (without the tensors).

Sequences hold blocks of `block_size` tokens. A full block is named by its
chained hash (`rotor.protocol.kv`: the parent block's hash and its token ids),
so equal prefixes have equal chains; a block holding an image's tokens hashes
the image's content hash too, so a different image behind the same text
misses from its first image block on. Blocks are registered under their hash as
soon as the step that fills them is scheduled; when their last user lets go,
hashed blocks stay in an LRU of free cached blocks, ready to be matched by a
later prompt, and are the last to be handed out (plain free blocks go first,
then the least recently freed cached one).

Below the device, two optional media hold what the device evicts (vLLM's
offloading connector, SGLang's HiCache): `host` and `disk`, each an LRU of
block hashes with room for `host_blocks` / `disk_blocks` (0: none). A block
the device evicts moves down to the host, the host's least recent one to
disk, and disk's least recent is gone. A prompt whose leading blocks sit on
a lower medium gets them back on the device (`match` finds them, `allocate`
brings them up, `loaded` counts them per medium: the scheduler charges
their transfer to the step). A block sits on one medium at a time: brought
up, or computed again on the device, it leaves the medium below.

The cache reports its own findable set, per medium: a `BlocksStored` event when
blocks are registered, `BlocksRemoved` when a cached block is evicted,
`AllCleared` on `clear()` (every medium), numbered from 1 without gaps;
`snapshot()` is the same set at once (the lower media's in its `lower`). A
block moved down is a `BlocksRemoved` of the device and a `BlocksStored` of
the host (a block that passes through a full host to disk in one allocation
is stored on disk only); brought back up, a `BlocksRemoved` of its medium
and a `BlocksStored` of the device.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seq

from rotor.engines.kv_chains import Pair, parents_first, runs
from rotor.engines.mocker.sequence import Sequence
from rotor.protocol.kv import (
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KVEvent,
    KVSnapshot,
    Medium,
    block_hashes,
)

KVListener = Callable[[KVEvent], None]

# In `match`'s hits: a block held on a lower medium, brought up by `allocate`.
LOWER = -1


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "parent")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None
        self.parent: int | None = None  # the parent block's hash, once hashed


class Tier:
    """A medium below the device: the hashes it holds, with their parents,
    least recently used first, and room for `capacity` blocks."""

    __slots__ = ("medium", "capacity", "blocks")

    def __init__(self, medium: Medium, capacity: int) -> None:
        self.medium = medium
        self.capacity = capacity
        self.blocks: OrderedDict[int, int | None] = OrderedDict()


class KVCache:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        listener: KVListener | None = None,
        host_blocks: int = 0,
        disk_blocks: int = 0,
    ) -> None:
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_plain: deque[int] = deque(range(num_blocks))
        self.free_cached: OrderedDict[int, None] = OrderedDict()  # LRU first
        self.hash_to_block: dict[int, int] = {}
        # The media below the device, top down (only those with room).
        media: tuple[tuple[Medium, int], ...] = (("host", host_blocks), ("disk", disk_blocks))
        self.lower = [Tier(medium, n) for medium, n in media if n > 0]
        # Blocks brought up to the device from each lower medium, ever.
        self.loaded: dict[Medium, int] = {t.medium: 0 for t in self.lower}
        self.listener = listener  # gets every event; replace it at will
        self.event_id = 0  # the last event's id (events are counted with no listener too)
        self._evicted: list[Pair] = []  # blocks dropped by the allocation in progress

    @property
    def num_total(self) -> int:
        return len(self.blocks)

    @property
    def num_free(self) -> int:
        """Blocks that can be handed out now (cached ones by eviction)."""
        return len(self.free_plain) + len(self.free_cached)

    @property
    def num_cached(self) -> int:
        """Free blocks kept for prefix reuse."""
        return len(self.free_cached)

    def holds(self, h: int) -> bool:
        """Whether a block is cached here, on the device or below it."""
        return h in self.hash_to_block or any(h in t.blocks for t in self.lower)

    def num_held(self, medium: Medium) -> int:
        """Blocks a lower medium holds (0: it has no room, or is not one)."""
        return next((len(t.blocks) for t in self.lower if t.medium == medium), 0)

    def block_hash(self, seq: Sequence, i: int) -> int:
        """Hash of the seq's i-th full block, chained on its parent's."""
        hashes = seq.block_hashes
        if len(hashes) <= i:
            bs, j = self.block_size, len(hashes)
            parent = hashes[j - 1] if j else seq.root
            tokens = seq.token_ids[j * bs : (i + 1) * bs]
            hashes.extend(block_hashes(tokens, bs, parent, seq.images, j * bs))
        return hashes[i]

    def match(self, seq: Sequence) -> list[int]:
        """Cached blocks equal to the seq's leading full blocks: the device's
        block id, or `LOWER` for a block a lower medium holds (`allocate`
        brings it up).

        At least one token is always left to compute: its step is what samples
        the next token.
        """
        hits: list[int] = []
        full = (seq.num_tokens - 1) // self.block_size
        if not full:
            return hits
        # Every leading block hashed in one call, not one call per block: each
        # is named (hashed) once computed anyway.
        self.block_hash(seq, full - 1)
        lookup, lower = self.hash_to_block.get, self.lower
        for h in seq.block_hashes[:full]:
            block_id = lookup(h)
            if block_id is None:
                if not lower or not any(h in t.blocks for t in lower):
                    break
                block_id = LOWER
            hits.append(block_id)
        return hits

    def in_place(self, seq: Sequence, num_tokens: int) -> bool:
        """`seq`'s blocks hold its first `num_tokens` tokens and name every
        full one: a decode step inside its last block, nothing to take or name."""
        bs = self.block_size
        return (
            num_tokens <= len(seq.block_table) * bs
            and min(num_tokens, seq.num_tokens) // bs <= seq.num_hashed_blocks
        )

    def allocate(self, seq: Sequence, num_tokens: int, hits: Seq[int] = ()) -> bool:
        """Give `seq` blocks for its first `num_tokens` tokens (after `hits`,
        those on a lower medium brought up), or change nothing and return
        False when there are not enough."""
        if not hits and self.in_place(seq, num_tokens):
            return True
        bs = self.block_size
        needed = -(-num_tokens // bs) - len(seq.block_table) - len(hits)
        blocks = self.blocks
        reclaimed = up = 0
        for b in hits:
            if b == LOWER:
                up += 1  # a device block of its own
            elif blocks[b].ref_count == 0:
                reclaimed += 1
        if needed + up > self.num_free - reclaimed:
            return False
        for block_id in hits:
            if block_id != LOWER:
                block = blocks[block_id]
                if block.ref_count == 0:
                    del self.free_cached[block_id]
                block.ref_count += 1
        brought = None
        if hits:  # admission: the table was empty, and hits are registered already
            table = seq.block_table
            table.extend(hits)
            if up:
                brought = self._bring_up(seq)
            seq.num_hashed_blocks = max(seq.num_hashed_blocks, len(table))
        for _ in range(needed):
            seq.block_table.append(self._take())
        self._flush_evicted()  # the room made on the device, then what came up
        if brought is not None:
            self._emit_brought_up(*brought)
        self._register(seq, min(num_tokens, seq.num_tokens) // self.block_size)
        return True

    def _bring_up(self, seq: Sequence) -> tuple[dict[Medium, list[int]], list[Pair]]:
        """The `LOWER` entries of the seq's new table: each block taken off its
        medium first (so the room made on the device cannot push it further
        down), then given a device block and registered there. What left
        each medium, and what came up (the events `_emit_brought_up` sends)."""
        table, hashes = seq.block_table, seq.block_hashes
        left: dict[Medium, list[int]] = {}
        up: list[tuple[int, int, int | None]] = []  # (position, hash, parent)
        for i, block_id in enumerate(table):
            if block_id == LOWER:
                h = hashes[i]
                tier = next(t for t in self.lower if h in t.blocks)  # (as `match` found it)
                up.append((i, h, tier.blocks.pop(h)))
                left.setdefault(tier.medium, []).append(h)
                self.loaded[tier.medium] += 1
        for i, h, parent in up:
            block_id = table[i] = self._take()
            block = self.blocks[block_id]
            block.hash, block.parent = h, parent
            self.hash_to_block[h] = block_id
        return left, [(h, parent) for _, h, parent in up]

    def _emit_brought_up(self, left: dict[Medium, list[int]], up: list[Pair]) -> None:
        for medium, gone in left.items():
            self._emit(BlocksRemoved(self._next_id(), gone, medium))
        for run, parent in runs(up):
            self._emit(BlocksStored(self._next_id(), run, parent, self.block_size))

    def free(self, seq: Sequence) -> None:
        """Release the seq's blocks, tail first so its deepest blocks are evicted first."""
        self._release(reversed(seq.block_table))
        seq.block_table.clear()
        seq.num_hashed_blocks = 0

    def pin(self, block_ids: Seq[int]) -> None:
        """Hold blocks for someone outside any sequence (a decode worker that
        will fetch them): eviction cannot take them until `unpin`."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                self.free_cached.pop(block_id, None)
            block.ref_count += 1

    def unpin(self, block_ids: Seq[int]) -> None:
        """Let go of pinned blocks; unused ones stay cached for prefix reuse."""
        self._release(block_ids)

    def _release(self, block_ids: Iterable[int]) -> None:
        """One reference less on each block; a block nobody uses goes to the
        cached LRU when it is registered under its hash, else to the plain free list."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count:
                continue
            if block.hash is not None and self.hash_to_block.get(block.hash) == block_id:
                self.free_cached[block_id] = None
            else:
                block.hash = None
                self.free_plain.append(block_id)

    def store(self, hashes: Seq[int], parent: int | None) -> int:
        """Blocks fetched from another worker, registered as if computed here
        (one stored event) and left cached for the prompt that needs them;
        how many leading ones fit (as many free blocks as there are)."""
        count = min(len(hashes), self.num_free)
        taken = [self._take() for _ in range(count)]
        self._flush_evicted()
        run: list[int] = []  # each unbroken run of new blocks is one stored event
        run_parent = parent
        for block_id, h in zip(taken, hashes, strict=False):
            block = self.blocks[block_id]
            block.ref_count = 0
            if h in self.hash_to_block:  # computed here meanwhile: keep that one
                self.free_plain.append(block_id)
                if run:
                    self._emit(BlocksStored(self._next_id(), run, run_parent, self.block_size))
                    run = []
            else:
                block.hash, block.parent = h, parent
                self.hash_to_block[h] = block_id
                self.free_cached[block_id] = None
                if not run:
                    run_parent = parent
                run.append(h)
            parent = h
        if run:
            self._emit(BlocksStored(self._next_id(), run, run_parent, self.block_size))
        if self.lower:
            self._leave_lower(hashes[:count])
        return count

    def clear(self) -> None:
        """Forget every registration (vLLM's prefix-cache reset), on every
        medium: cached blocks become plain free blocks, blocks in use are never
        matched again, and the lower media are emptied."""
        for block in self.blocks:
            block.hash = block.parent = None
        self.hash_to_block.clear()
        self.free_plain.extend(self.free_cached)
        self.free_cached.clear()
        for tier in self.lower:
            tier.blocks.clear()
        self._emit(AllCleared(self._next_id()))

    def snapshot(self) -> KVSnapshot:
        """Every registered block as (hash, parent), parents first, as of the
        last event: the device's in `blocks`, each lower medium's in `lower`."""
        parent_of = {h: self.blocks[b].parent for h, b in self.hash_to_block.items()}
        lower: dict[str, list[Pair]] = {t.medium: parents_first(t.blocks) for t in self.lower}
        return KVSnapshot(self.event_id, self.block_size, parents_first(parent_of), lower)

    def _take(self) -> int:
        if self.free_plain:
            block_id = self.free_plain.popleft()
        else:
            block_id, _ = self.free_cached.popitem(last=False)
            block = self.blocks[block_id]
            # `free` caches only blocks registered under their hash, and a
            # registration is dropped only here (and by `clear`).
            assert block.hash is not None
            del self.hash_to_block[block.hash]
            self._evicted.append((block.hash, block.parent))
            block.hash = block.parent = None
        self.blocks[block_id].ref_count = 1
        return block_id

    def _flush_evicted(self) -> None:
        """The device's evictions so far: removed there, and moved down."""
        evicted = self._evicted
        if evicted:
            self._evicted = []
            self._emit(BlocksRemoved(self._next_id(), [h for h, _ in evicted]))
            if self.lower:
                self._move_down(evicted)

    def _move_down(self, incoming: list[Pair]) -> None:
        """Blocks the device evicted, down the media: each medium takes them
        as its most recent and passes its overflow, least recent first, to
        the next; what overflows the last is gone. Each medium's events say
        what it holds after the whole move (a block that passed through is
        neither stored nor removed there)."""
        for tier in self.lower:
            held = tier.blocks
            for h, parent in incoming:
                held[h] = parent
            overflow: list[Pair] = []
            while len(held) > tier.capacity:
                overflow.append(held.popitem(last=False))
            stored, removed = incoming, [h for h, _ in overflow]
            if overflow:
                came = {h for h, _ in incoming}
                passed = {h for h in removed if h in came}
                stored = [pair for pair in incoming if pair[0] not in passed]
                removed = [h for h in removed if h not in came]
            if removed:
                self._emit(BlocksRemoved(self._next_id(), removed, tier.medium))
            for run, parent in runs(stored):
                self._emit(BlocksStored(self._next_id(), run, parent, self.block_size, tier.medium))
            incoming = overflow
            if not incoming:
                return

    def _leave_lower(self, hashes: Seq[int]) -> None:
        """Blocks just registered on the device leave the media below, where
        they may still sit (computed again, or fetched, rather than brought up)."""
        for tier in self.lower:
            held = tier.blocks
            gone = [h for h in hashes if h in held]
            if gone:
                for h in gone:
                    del held[h]
                self._emit(BlocksRemoved(self._next_id(), gone, tier.medium))

    def _register(self, seq: Sequence, num_full: int) -> None:
        """Name the seq's newly full blocks so later prompts can find them; each
        unbroken run of new registrations is one stored event (and a block a
        lower medium held leaves it: the device's copy is the one now)."""
        run: list[int] = []
        run_parent: int | None = None
        fresh: list[int] | None = [] if self.lower else None
        for i in range(seq.num_hashed_blocks, num_full):
            block = self.blocks[seq.block_table[i]]
            if block.hash is None:
                block.hash = self.block_hash(seq, i)
                block.parent = seq.block_hashes[i - 1] if i else None
                if block.hash not in self.hash_to_block:
                    self.hash_to_block[block.hash] = block.block_id
                    if not run:
                        run_parent = block.parent
                    run.append(block.hash)
                    if fresh is not None:
                        fresh.append(block.hash)
                    continue
            # Already named, or a duplicate of a block another sequence registered.
            if run:
                self._emit(BlocksStored(self._next_id(), run, run_parent, self.block_size))
                run = []
        if run:
            self._emit(BlocksStored(self._next_id(), run, run_parent, self.block_size))
        if fresh:
            self._leave_lower(fresh)
        seq.num_hashed_blocks = max(seq.num_hashed_blocks, num_full)

    def _next_id(self) -> int:
        self.event_id += 1
        return self.event_id

    def _emit(self, event: KVEvent) -> None:
        if self.listener is not None:
            self.listener(event)
