"""The mocker's KV cache and scheduler on their own: block accounting, hashing,
LRU eviction, chunking and preemption order."""

from __future__ import annotations

from rotor.engines.mocker.config import MockerConfig
from rotor.engines.mocker.kv_cache import KVCache
from rotor.engines.mocker.scheduler import Scheduler
from rotor.engines.mocker.script import ScriptSource
from rotor.engines.mocker.sequence import Sequence, SequenceStatus


def seq(tokens: list[int], rid: str = "r") -> Sequence:
    return Sequence(rid, 0, tokens, ScriptSource([], "eof", 1, None))


def test_allocate_and_free_account_for_every_block() -> None:
    kv = KVCache(num_blocks=8, block_size=4)
    s = seq(list(range(10)))
    assert kv.allocate(s, 10)
    assert len(s.block_table) == 3 and kv.num_free == 5
    assert kv.allocate(s, 12) and len(s.block_table) == 3  # the third block has room
    assert kv.allocate(s, 13) and len(s.block_table) == 4
    kv.free(s)
    assert kv.num_free == 8 and s.block_table == []


def test_failed_allocation_changes_nothing() -> None:
    kv = KVCache(num_blocks=3, block_size=4)
    s = seq(list(range(20)))
    assert not kv.allocate(s, 13)
    assert kv.num_free == 3 and s.block_table == []


def test_full_blocks_are_matched_by_chained_hash() -> None:
    kv = KVCache(num_blocks=16, block_size=4)
    a = seq(list(range(13)))
    assert kv.allocate(a, 13)
    kv.free(a)
    assert kv.num_cached == 3  # three full blocks; the partial one is plain again
    same = seq(list(range(13)))
    assert len(kv.match(same)) == 3
    # At least one token must be computed, so a block-aligned prompt leaves its last block.
    assert len(kv.match(seq(list(range(12))))) == 2
    # Equal tokens after a different first block do not match: hashes are chained.
    diverged = seq([99, 1, 2, 3, *range(4, 13)])
    assert kv.match(diverged) == []
    tail = seq([*range(8), 99, 99, 99, 99, 99])
    assert len(kv.match(tail)) == 2


def test_matched_blocks_are_shared_not_copied() -> None:
    kv = KVCache(num_blocks=8, block_size=4)
    a, b = seq(list(range(9)), "a"), seq(list(range(9)), "b")
    assert kv.allocate(a, 9)
    hits = kv.match(b)
    assert hits == a.block_table[:2]
    assert kv.allocate(b, 9, hits)
    assert b.block_table[:2] == a.block_table[:2] and b.block_table[2] != a.block_table[2]
    assert kv.num_free == 8 - 4
    kv.free(a)
    assert kv.num_free == 8 - 3  # shared blocks stay held by b
    kv.free(b)
    assert kv.num_free == 8


def test_plain_blocks_go_before_cached_ones_and_eviction_is_lru() -> None:
    kv = KVCache(num_blocks=4, block_size=2)
    old, new = seq([1, 2, 3, 4], "old"), seq([5, 6, 7, 8], "new")
    assert kv.allocate(old, 4)
    kv.free(old)
    assert kv.allocate(new, 4)
    kv.free(new)
    assert kv.num_cached == 4 and kv.num_free == 4
    # Needing one block evicts the least recently freed one: old's (tail first).
    filler = seq([9, 9, 9])
    assert kv.allocate(filler, 1)
    assert len(kv.match(seq([1, 2, 3, 4, 0]))) == 1
    assert len(kv.match(seq([5, 6, 7, 8, 0]))) == 2
    assert kv.allocate(filler, 3)
    assert kv.match(seq([1, 2, 3, 4, 0])) == []
    assert len(kv.match(seq([5, 6, 7, 8, 0]))) == 2
    kv.free(filler)
    plain = seq([0, 0, 0])
    assert kv.allocate(plain, 1)  # a plain free block is used before any cached one
    assert len(kv.match(seq([5, 6, 7, 8, 0]))) == 2


def test_scheduler_chunks_a_long_prompt() -> None:
    sched = Scheduler(MockerConfig(max_num_batched_tokens=8, block_size=4, num_kv_blocks=64))
    s = seq(list(range(20)))
    sched.add(s)
    sizes = []
    while s.num_pending:
        batch = sched.schedule()
        sizes.append(batch.items[0][1])
        assert batch.prefill_tokens == sizes[-1] and batch.decode_seqs == 0
        sampled = list(sched.advance(batch))
        assert sampled == ([s] if s.num_pending == 0 else [])
    assert sizes == [8, 8, 4]


def test_scheduler_preempts_the_youngest_and_requeues_it_first() -> None:
    sched = Scheduler(MockerConfig(block_size=2, num_kv_blocks=4))
    old, young = seq([1, 2, 3, 4], "old"), seq([5, 6, 7, 8], "young")
    late = seq([9, 9, 9], "late")
    for s in (old, young, late):
        sched.add(s)
    batch = sched.schedule()
    assert [s.request_id for s, _ in batch.items] == ["old", "young"]  # no blocks for late
    list(sched.advance(batch))
    for s in (old, young):
        s.token_ids.append(7)  # sampled: each now needs a third block
    batch = sched.schedule()
    assert [s.request_id for s, _ in batch.items] == ["old"]
    assert sched.preemptions == 1
    assert young.status is SequenceStatus.WAITING and young.num_computed == 0
    assert list(sched.waiting) == [young, late] and young.block_table == []
    assert batch.decode_seqs == 1 and batch.prefill_tokens == 0
    sched.finish(old)
    assert sched.kv.num_free == 4
    batch = sched.schedule()  # recompute: prompt and output so far, with cache hits
    assert batch.items[0] == (young, young.num_tokens - young.num_computed)
    assert young.num_computed > 0  # its full blocks were still cached


def ranked(tokens: list[int], rid: str, priority: int) -> Sequence:
    return Sequence(rid, 0, tokens, ScriptSource([], "eof", 1, None), priority=priority)


def test_priority_policy_admits_lowest_priority_first_fifo_within_one() -> None:
    """vLLM's priority queue: (priority, arrival); fcfs keeps arrival order."""
    for policy, order in (
        ("priority", ["a0", "c0", "b5", "d5", "e9"]),
        ("fcfs", ["e9", "b5", "a0", "c0", "d5"]),
    ):
        sched = Scheduler(MockerConfig(max_num_seqs=1, scheduling_policy=policy))
        for rid in ("e9", "b5", "a0", "c0", "d5"):
            sched.add(ranked([1, 2, 3], rid, int(rid[1])))
        admitted = []
        while sched.waiting:
            batch = sched.schedule()
            admitted += [s.request_id for s, _ in batch.items]
            sched.finish(batch.items[0][0])
        assert admitted == order, policy


def test_priority_policy_preempts_the_lowest_priority_even_when_older() -> None:
    """The victim is the running sequence last in (priority, arrival), already
    scheduled this step or not, and it waits ahead of a later, lower one."""
    sched = Scheduler(MockerConfig(block_size=2, num_kv_blocks=4, scheduling_policy="priority"))
    low, high = ranked([1, 2, 3], "low", 10), ranked([5, 6, 7, 8], "high", 0)
    later = ranked([9, 9, 9], "later", 10)
    for s in (low, high, later):
        sched.add(s)
    batch = sched.schedule()
    assert [s.request_id for s, _ in batch.items] == ["high", "low"]
    list(sched.advance(batch))
    for s in (low, high):
        s.token_ids.append(7)  # low's fits its last block, high needs a third: one must go
    sched.running.sort(key=lambda s: s.request_id != "low")  # low is scheduled first
    batch = sched.schedule()
    assert [s.request_id for s, _ in batch.items] == ["high"]  # low's item taken back
    assert batch.decode_seqs == 1 and batch.prefill_tokens == 0
    assert low.status is SequenceStatus.WAITING and sched.preemptions == 1
    assert list(sched.waiting) == [low, later]  # same priority: arrival order
