"""The mocker's KV cache reports its own findable set: a consumer that replays its
events (or its snapshot) holds exactly the hashes the cache can match, with the
right parents, and event ids run from 1 without gaps."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.engines.mocker.config import MockerConfig
from rotor.engines.mocker.kv_cache import KVCache
from rotor.engines.mocker.scheduler import Scheduler
from rotor.engines.mocker.script import ScriptSource
from rotor.engines.mocker.sequence import Sequence, SequenceStatus
from rotor.protocol.kv import (
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KVEvent,
    KVSnapshot,
    block_hashes,
)

from support.mocker import PROMPT, TOK, MakeEngine, collect, request


def seq(tokens: list[int], rid: str = "r") -> Sequence:
    return Sequence(rid, 0, tokens, ScriptSource([], "eof", 1, None))


class Replica:
    """What a router's index keeps for one worker, built from its events alone."""

    def __init__(self) -> None:
        self.parents: dict[int, int | None] = {}
        self.last_id = 0
        self.events: list[KVEvent] = []

    def __call__(self, event: KVEvent) -> None:
        assert event.event_id == self.last_id + 1, "event ids run without gaps"
        self.last_id = event.event_id
        self.events.append(event)
        if isinstance(event, BlocksStored):
            parent = event.parent_hash
            for h in event.block_hashes:
                assert h not in self.parents, "a stored block was not findable before"
                self.parents[h] = parent
                parent = h
        elif isinstance(event, BlocksRemoved):
            for h in event.block_hashes:
                del self.parents[h]  # a removed block was findable
        else:
            assert isinstance(event, AllCleared)
            self.parents.clear()

    @classmethod
    def from_snapshot(cls, snap: KVSnapshot) -> Replica:
        replica = cls()
        replica.last_id = snap.event_id
        held = {h for h, _ in snap.blocks}
        for h, parent in snap.blocks:
            assert parent is None or parent in replica.parents or parent not in held
            replica.parents[h] = parent
        return replica


def matchable(kv: KVCache) -> set[int]:
    return set(kv.hash_to_block)


def agree(kv: KVCache, replica: Replica) -> None:
    assert set(replica.parents) == matchable(kv)
    assert replica.last_id == kv.event_id
    from_snapshot = Replica.from_snapshot(kv.snapshot())
    assert from_snapshot.parents == replica.parents
    assert from_snapshot.last_id == replica.last_id


def stored(replica: Replica) -> list[tuple[list[int], int | None]]:
    return [(e.block_hashes, e.parent_hash) for e in replica.events if isinstance(e, BlocksStored)]


def test_allocation_stores_its_full_blocks_as_one_chain() -> None:
    replica = Replica()
    kv = KVCache(num_blocks=8, block_size=4, listener=replica)
    s = seq(list(range(10)))
    assert kv.allocate(s, 6)  # a prefill chunk that ends inside the second block
    h = block_hashes(list(range(12)), 4)
    assert replica.events == [BlocksStored(1, h[:1], None, 4)]
    assert kv.allocate(s, 10)  # the next chunk fills it: stored, chained on the first
    assert replica.events[1] == BlocksStored(2, h[1:2], h[0], 4)
    s.token_ids += [10, 11]  # decoded tokens fill the third block
    assert kv.allocate(s, 12)
    assert replica.events[2] == BlocksStored(3, h[2:3], h[1], 4)
    assert len(kv.match(seq(list(range(13))))) == 3
    agree(kv, replica)


def test_a_prefix_hit_stores_only_the_new_blocks() -> None:
    replica = Replica()
    kv = KVCache(num_blocks=8, block_size=2, listener=replica)
    a = seq([1, 2, 3, 4, 5])
    assert kv.allocate(a, 5)
    kv.free(a)  # still findable: no event
    assert len(replica.events) == 1
    b = seq([1, 2, 3, 4, 9, 9, 0])
    hits = kv.match(b)
    assert len(hits) == 2 and kv.allocate(b, 7, hits)
    ha, hb = block_hashes(a.token_ids, 2), block_hashes(b.token_ids, 2)
    assert hb[:2] == ha
    assert stored(replica) == [(ha, None), ([hb[2]], ha[1])]
    agree(kv, replica)


def test_eviction_under_pressure_removes_the_evicted_blocks() -> None:
    replica = Replica()
    kv = KVCache(num_blocks=4, block_size=2, listener=replica)
    old, new = seq([1, 2, 3, 4], "old"), seq([5, 6, 7, 8], "new")
    for s in (old, new):
        assert kv.allocate(s, 4)
        kv.free(s)
    assert kv.num_cached == 4 and len(replica.events) == 2
    filler = seq([9, 9, 9, 9, 9, 9])
    assert kv.allocate(filler, 6)  # three blocks: old's two (tail first), then new's tail
    h_old, h_new = block_hashes(old.token_ids, 2), block_hashes(new.token_ids, 2)
    h_fill = block_hashes(filler.token_ids, 2)
    assert replica.events[2] == BlocksRemoved(3, [h_old[1], h_old[0], h_new[1]])
    assert replica.events[3] == BlocksStored(4, h_fill, None, 2)  # after the removal
    agree(kv, replica)
    assert matchable(kv) == {h_new[0], *h_fill}


def test_a_duplicate_block_is_not_stored_and_splits_the_chain() -> None:
    replica = Replica()
    kv = KVCache(num_blocks=16, block_size=2, listener=replica)
    a = seq([1, 2, 3, 4, 7, 7], "a")
    assert kv.allocate(a, 1)  # a chunk of a's prefill: no full block yet
    b = seq([1, 2, 3, 4, 5, 6], "b")
    assert kv.allocate(b, 6)
    assert kv.allocate(a, 6)  # a's first two blocks equal b's, computed twice
    ha, hb = block_hashes(a.token_ids, 2), block_hashes(b.token_ids, 2)
    assert stored(replica) == [(hb, None), ([ha[2]], ha[1])]
    kv.free(a)  # a's copies were never findable; its own third block stays cached
    kv.free(b)
    agree(kv, replica)
    assert matchable(kv) == {*hb, ha[2]}


def test_preemption_and_free_keep_blocks_findable() -> None:
    replica = Replica()
    sched = Scheduler(MockerConfig(block_size=2, num_kv_blocks=4))
    sched.kv.listener = replica
    old, young = seq([1, 2, 3, 4], "old"), seq([5, 6, 7, 8], "young")
    for s in (old, young):
        sched.add(s)
    list(sched.advance(sched.schedule()))
    h_old, h_young = block_hashes(old.token_ids, 2), block_hashes(young.token_ids, 2)
    assert stored(replica) == [(h_old, None), (h_young, None)]
    for s in (old, young):
        s.token_ids.append(7)
    sched.schedule()  # young is preempted; old's new block evicts young's tail, only that
    assert sched.preemptions == 1 and young.status is SequenceStatus.WAITING
    assert replica.events[2:] == [BlocksRemoved(3, [h_young[1]])]
    agree(sched.kv, replica)
    sched.finish(old)  # old's blocks stay cached: no event
    assert len(replica.events) == 3
    agree(sched.kv, replica)
    list(sched.advance(sched.schedule()))  # young is back on its cached first block
    assert young.num_computed == young.num_tokens
    h_young = block_hashes(young.token_ids, 2)
    # Its second block takes old's plain tail and evicts old's least recent block.
    assert replica.events[3:] == [
        BlocksRemoved(4, [h_old[1]]),
        BlocksStored(5, h_young[1:], h_young[0], 2),
    ]
    agree(sched.kv, replica)


def test_clear_forgets_every_registration() -> None:
    replica = Replica()
    kv = KVCache(num_blocks=8, block_size=2, listener=replica)
    held, cached = seq([1, 2, 3, 4], "held"), seq([5, 6, 7], "cached")
    assert kv.allocate(held, 4) and kv.allocate(cached, 3)
    kv.free(cached)
    kv.clear()
    assert replica.events[-1] == AllCleared(3)
    assert matchable(kv) == set() and kv.num_cached == 0 and kv.num_free == 6
    assert kv.match(seq([1, 2, 3, 4, 0])) == []
    kv.free(held)  # its blocks were named but are no longer findable: plain again
    assert kv.num_free == 8 and kv.num_cached == 0
    agree(kv, replica)


def test_ids_count_without_a_listener_and_the_snapshot_names_the_last() -> None:
    kv = KVCache(num_blocks=8, block_size=2)
    a = seq([1, 2, 3, 4, 5, 6])
    assert kv.allocate(a, 2) and kv.allocate(a, 6)
    snap = kv.snapshot()
    h = block_hashes(a.token_ids, 2)
    assert snap == KVSnapshot(2, 2, [(h[0], None), (h[1], h[0]), (h[2], h[1])])
    replica = Replica.from_snapshot(snap)
    kv.listener = replica
    kv.clear()
    agree(kv, replica)


def test_snapshot_lists_parents_before_children() -> None:
    """Even when a child was registered before its parent: a copy of the parent
    lives on in a sequence after the registered one is evicted, the sequence
    fills the child, and only then is the parent registered again."""
    replica = Replica()
    kv = KVCache(num_blocks=4, block_size=1, listener=replica)
    r, x = seq([1], "r"), seq([1, 2], "x")
    assert kv.allocate(r, 1) and kv.allocate(x, 1)  # x's first block copies r's
    kv.free(r)
    y = seq([9, 9, 9], "y")
    assert kv.allocate(y, 3)  # evicts r's block: [1] is no longer findable
    kv.free(y)
    assert kv.allocate(x, 2)  # x's [1, 2] is registered, its parent is not
    z = seq([1], "z")
    assert kv.match(z) == [] and kv.allocate(z, 1)  # [1] is registered again
    parent, child = block_hashes([1, 2], 1)
    assert list(kv.hash_to_block).index(child) < list(kv.hash_to_block).index(parent)
    snap = kv.snapshot()
    order = [h for h, _ in snap.blocks]
    assert order.index(parent) < order.index(child)
    assert dict(snap.blocks)[child] == parent
    agree(kv, replica)


# -- random workloads through the scheduler -------------------------------------

BASES = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [1, 2, 3, 4, 20, 21, 22, 23, 24], [30] * 12]


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 4), st.integers(3, 8), st.integers(2, 16))
def test_random_workloads_keep_the_replica_exact(
    rng: random.Random, block_size: int, num_blocks: int, budget: int
) -> None:
    """Admission, chunked prefill, decode, prefix hits, eviction, preemption,
    finishing and the odd clear, checked after every operation."""
    replica = Replica()
    sched = Scheduler(
        MockerConfig(block_size=block_size, num_kv_blocks=num_blocks, max_num_batched_tokens=budget)
    )
    sched.kv.listener = replica
    truth: dict[int, int | None] = {}  # every hash the test's own tokens can produce
    live: list[Sequence] = []
    for n in range(200):
        roll = rng.random()
        if roll < 0.3:
            tokens = rng.choice(BASES)[: rng.randint(1, 12)]
            if len(tokens) + 8 <= num_blocks * block_size:  # it fits, even alone
                live.append(seq(tokens, f"s{n}"))
                sched.add(live[-1])
        elif roll < 0.9:
            for s in sched.advance(sched.schedule()):
                s.token_ids.append(rng.choice((40, 41, 1)))
                if s.num_generated >= 8:
                    sched.finish(s)
        elif roll < 0.99:
            if live:
                sched.finish(rng.choice(live))
        else:
            sched.kv.clear()
        for s in live:
            hashes = block_hashes(s.token_ids, block_size)
            truth.update(zip(hashes, [None, *hashes], strict=False))
        agree(sched.kv, replica)
        assert all(truth[h] == parent for h, parent in replica.parents.items())


async def test_the_mocker_engine_streams_its_cache_events(make_engine: MakeEngine) -> None:
    engine = await make_engine(block_size=4)
    replica = Replica()
    replica.last_id = engine.kv_events(replica).event_id
    first = await collect(engine, request(mock={"output": "Hello there, friend."}, prompt=PROMPT))
    kv = engine.scheduler.kv
    assert replica.events and set(replica.parents) == matchable(kv)
    prompt_blocks = block_hashes(TOK.encode(PROMPT), 4)
    assert set(prompt_blocks) <= set(replica.parents)
    before = len(replica.events)
    again = await collect(engine, request(mock={"output": "Hello there, friend."}, prompt=PROMPT))
    assert again[0].cached_tokens == first[0].cached_tokens + len(prompt_blocks) * 4
    # The prompt's blocks were found, not stored again.
    new = {
        h for e in replica.events[before:] if isinstance(e, BlocksStored) for h in e.block_hashes
    }
    assert not new & set(prompt_blocks)
    assert engine.kv_events(None) == kv.snapshot()
    assert Replica.from_snapshot(kv.snapshot()).parents == replica.parents
