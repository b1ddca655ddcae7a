"""A paged KV cache with prefix reuse, as vLLM keeps it (without the tensors).

Sequences hold blocks of `block_size` tokens. A full block is named by its
chained hash (`rotor.protocol.kv`: the parent block's hash and its token ids),
so equal prefixes have equal chains. Blocks are registered under their hash as
soon as the step that fills them is scheduled; when their last user lets go,
hashed blocks stay in an LRU of free cached blocks, ready to be matched by a
later prompt, and are the last to be handed out (plain free blocks go first,
then the least recently freed cached one).

The cache reports its own findable set: a `BlocksStored` event when blocks are
registered, `BlocksRemoved` when a cached block is evicted, `AllCleared` on
`clear()`, numbered from 1 without gaps; `snapshot()` is the same set at once.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seq

from rotor.engines.mocker.sequence import Sequence
from rotor.protocol.kv import (
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KVEvent,
    KVSnapshot,
    block_hashes,
)

KVListener = Callable[[KVEvent], None]


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "parent")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None
        self.parent: int | None = None  # the parent block's hash, once hashed


class KVCache:
    def __init__(
        self, num_blocks: int, block_size: int, listener: KVListener | None = None
    ) -> None:
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_plain: deque[int] = deque(range(num_blocks))
        self.free_cached: OrderedDict[int, None] = OrderedDict()  # LRU first
        self.hash_to_block: dict[int, int] = {}
        self.listener = listener  # gets every event; replace it at will
        self.event_id = 0  # the last event's id (events are counted with no listener too)
        self._evicted: list[int] = []  # hashes dropped by the allocation in progress

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

    def block_hash(self, seq: Sequence, i: int) -> int:
        """Hash of the seq's i-th full block, chained on its parent's."""
        hashes = seq.block_hashes
        if len(hashes) <= i:
            bs, j = self.block_size, len(hashes)
            parent = hashes[j - 1] if j else seq.root
            hashes.extend(block_hashes(seq.token_ids[j * bs : (i + 1) * bs], bs, parent))
        return hashes[i]

    def match(self, seq: Sequence) -> list[int]:
        """Cached blocks equal to the seq's leading full blocks.

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
        lookup = self.hash_to_block.get
        for h in seq.block_hashes[:full]:
            block_id = lookup(h)
            if block_id is None:
                break
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
        """Give `seq` blocks for its first `num_tokens` tokens (after `hits`), or
        change nothing and return False when there are not enough."""
        if not hits and self.in_place(seq, num_tokens):
            return True
        bs = self.block_size
        needed = -(-num_tokens // bs) - len(seq.block_table) - len(hits)
        reclaimed = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        if needed > self.num_free - reclaimed:
            return False
        for block_id in hits:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free_cached[block_id]
            block.ref_count += 1
        if hits:  # admission: the table was empty, and hits are registered already
            seq.block_table.extend(hits)
            seq.num_hashed_blocks = max(seq.num_hashed_blocks, len(seq.block_table))
        for _ in range(needed):
            seq.block_table.append(self._take())
        if self._evicted:
            self._emit(BlocksRemoved(self._next_id(), self._evicted))
            self._evicted = []
        self._register(seq, min(num_tokens, seq.num_tokens) // self.block_size)
        return True

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
        if self._evicted:
            self._emit(BlocksRemoved(self._next_id(), self._evicted))
            self._evicted = []
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
        return count

    def clear(self) -> None:
        """Forget every registration (vLLM's prefix-cache reset): cached blocks
        become plain free blocks, and blocks in use are never matched again."""
        for block in self.blocks:
            block.hash = block.parent = None
        self.hash_to_block.clear()
        self.free_plain.extend(self.free_cached)
        self.free_cached.clear()
        self._emit(AllCleared(self._next_id()))

    def snapshot(self) -> KVSnapshot:
        """Every registered block as (hash, parent), parents first, as of the last event."""
        parent_of = {h: self.blocks[b].parent for h, b in self.hash_to_block.items()}
        children: dict[int, list[int]] = {}
        order: list[int] = []  # roots: no parent, or a parent no longer held
        for h, parent in parent_of.items():
            if parent is not None and parent in parent_of:
                children.setdefault(parent, []).append(h)
            else:
                order.append(h)
        for h in order:  # grows while it runs: breadth first from the roots
            order.extend(children.get(h, ()))
        return KVSnapshot(self.event_id, self.block_size, [(h, parent_of[h]) for h in order])

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
            self._evicted.append(block.hash)
            block.hash = block.parent = None
        self.blocks[block_id].ref_count = 1
        return block_id

    def _register(self, seq: Sequence, num_full: int) -> None:
        """Name the seq's newly full blocks so later prompts can find them; each
        unbroken run of new registrations is one stored event."""
        run: list[int] = []
        run_parent: int | None = None
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
                    continue
            # Already named, or a duplicate of a block another sequence registered.
            if run:
                self._emit(BlocksStored(self._next_id(), run, run_parent, self.block_size))
                run = []
        if run:
            self._emit(BlocksStored(self._next_id(), run, run_parent, self.block_size))
        seq.num_hashed_blocks = max(seq.num_hashed_blocks, num_full)

    def _next_id(self) -> int:
        self.event_id += 1
        return self.event_id

    def _emit(self, event: KVEvent) -> None:
        if self.listener is not None:
            self.listener(event)
