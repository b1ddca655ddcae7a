"""The KV prefix index: events in order, gaps and stale events refused, resync,
workers leaving, overlaps against a brute-force reference, TTL expiry; blocks
per medium (device, host, disk), each counted where its best copy sits, and a
snapshot's lower media; predicted blocks created, confirmed, expired (on a
fake clock), cleared by a removal and by the worker leaving, and credited as
the larger of what is real and what is predicted."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.protocol.engine import pulled
from rotor.protocol.kv import (
    MEDIA,
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KVSnapshot,
    Medium,
    block_hashes,
)
from rotor.router.kv_index import Applied, ApproxKVIndex, KVIndex, Overlap, PrefixMap

from support.clock import FakeClock
from support.mocker import CARD, TOK

BS = 4
A = block_hashes(list(range(40)), BS)  # 10 chained blocks
B = block_hashes(list(range(100, 124)), BS)  # 6 blocks, another prefix


def stored(
    eid: int, hashes: list[int], parent: int | None = None, medium: Medium = "device"
) -> BlocksStored:
    return BlocksStored(eid, hashes, parent, BS, medium)


def test_insert_gives_leading_overlap() -> None:
    index = KVIndex(BS)
    assert index.apply("w0", stored(1, A[:6])) is Applied.APPLIED
    assert index.apply("w1", stored(1, A[:3])) is Applied.APPLIED
    assert index.apply("w1", stored(2, B)) is Applied.APPLIED
    assert index.overlaps(A) == {"w0": 6, "w1": 3}
    assert index.overlaps(B) == {"w1": 6}
    assert index.overlaps(B[:2]) == {"w1": 2}
    # Same tokens after a different first block: a different chain, held by nobody.
    assert index.overlaps(block_hashes([99] * BS + list(range(BS, 40)), BS)) == {}
    assert index.overlaps([]) == {}
    assert index.num_blocks("w1") == 9
    assert len(index) == 6 + 6


def test_continued_chain_extends_the_overlap() -> None:
    index = KVIndex(BS)
    index.apply("w", stored(1, A[:4]))
    index.apply("w", stored(2, A[4:8], A[3]))
    assert index.overlaps(A) == {"w": 8}


def test_remove_cuts_the_leading_run() -> None:
    index = KVIndex(BS)
    index.apply("w0", stored(1, A))
    index.apply("w1", stored(1, A))
    assert index.apply("w0", BlocksRemoved(2, [A[4]])) is Applied.APPLIED
    assert index.overlaps(A) == {"w0": 4, "w1": 10}  # w0 still holds A[5:], unreachable
    index.apply("w0", BlocksRemoved(3, [A[0], 12345]))  # an unknown hash is ignored
    assert index.overlaps(A) == {"w1": 10}
    assert index.num_blocks("w0") == 8


def test_clear_drops_only_that_worker() -> None:
    index = KVIndex(BS)
    index.apply("w0", stored(1, A))
    index.apply("w1", stored(1, A[:2]))
    assert index.apply("w0", AllCleared(2)) is Applied.APPLIED
    assert index.overlaps(A) == {"w1": 2}
    assert index.num_blocks("w0") == 0
    assert len(index) == 2


def test_gap_is_reported_and_later_events_held_until_resync() -> None:
    index = KVIndex(BS)
    index.apply("w", stored(1, A[:2]))
    assert index.apply("w", stored(3, B)) is Applied.GAP  # event 2 was lost
    assert index.awaiting_resync("w")
    assert index.apply("w", BlocksRemoved(4, [B[5]])) is Applied.HELD
    assert index.overlaps(B) == {}  # nothing past the gap is applied
    assert index.last_event_id("w") == 1
    # The snapshot as of event 3: A[:4] (event 2 stored A[2:4]) and B.
    snap = KVSnapshot(3, BS, [(A[0], None), (A[1], A[0]), (A[2], A[1]), (A[3], A[2])])
    snap.blocks += [(h, B[i - 1] if i else None) for i, h in enumerate(B)]
    assert index.resync("w", snap) is True
    # Event 3 is covered by the snapshot, the held event 4 is replayed on top.
    assert index.overlaps(A) == {"w": 4}
    assert index.overlaps(B) == {"w": 5}
    assert index.last_event_id("w") == 4
    assert not index.awaiting_resync("w")
    assert index.apply("w", stored(5, A[4:6], A[3])) is Applied.APPLIED
    assert index.overlaps(A) == {"w": 6}


def test_resync_reports_a_gap_still_open_after_the_snapshot() -> None:
    index = KVIndex(BS)
    index.apply("w", stored(1, A[:1]))
    assert index.apply("w", stored(5, B)) is Applied.GAP
    assert index.resync("w", KVSnapshot(3, BS, [(A[0], None)])) is False  # 4 still missing
    assert index.awaiting_resync("w")
    assert index.overlaps(B) == {}
    assert index.resync("w", KVSnapshot(5, BS, [(A[0], None), (B[0], None)])) is True
    assert index.overlaps(B) == {"w": 1}


def test_out_of_order_and_duplicate_events_are_refused() -> None:
    index = KVIndex(BS)
    index.apply("w", stored(1, A[:2]))
    index.apply("w", stored(2, B[:2]))
    assert index.apply("w", BlocksRemoved(1, [A[0]])) is Applied.STALE
    assert index.apply("w", stored(2, A)) is Applied.STALE
    assert index.overlaps(A) == {"w": 2}
    assert index.last_event_id("w") == 2


def test_unknown_worker_must_start_at_event_one() -> None:
    index = KVIndex(BS)
    assert index.last_event_id("new") is None
    assert index.apply("new", stored(7, A)) is Applied.GAP  # a restarted frontend, say
    assert index.overlaps(A) == {}


def test_resync_replaces_the_workers_blocks() -> None:
    index = KVIndex(BS)
    index.apply("w", stored(1, A))
    index.apply("other", stored(1, A[:3]))
    assert index.resync("w", KVSnapshot(10, BS, [(B[0], None), (B[1], B[0])]))
    assert index.overlaps(A) == {"other": 3}
    assert index.overlaps(B) == {"w": 2}
    assert index.apply("w", stored(9, A)) is Applied.STALE
    assert index.apply("w", stored(11, A[:1])) is Applied.APPLIED


def test_worker_leaving_drops_its_blocks_and_its_slot_is_reused() -> None:
    index = KVIndex(BS)
    index.apply("w0", stored(1, A))
    index.apply("w1", stored(1, A[:5]))
    index.remove_worker("w0")
    assert index.overlaps(A) == {"w1": 5}
    assert index.workers == ["w1"]
    assert len(index) == 5
    index.apply("w2", stored(1, A[:2]))  # takes w0's slot: must not inherit its bits
    assert index.overlaps(A) == {"w1": 5, "w2": 2}
    index.remove_worker("nobody")  # unknown: no error
    assert index.last_event_id("w0") is None  # a returning w0 starts over


def test_block_size_mismatch_is_an_error() -> None:
    index = KVIndex(BS)
    with pytest.raises(ValueError, match="blocks of 16 tokens"):
        index.apply("w", BlocksStored(1, A, None, 16))
    with pytest.raises(ValueError, match="blocks of 8 tokens"):
        index.resync("w", KVSnapshot(0, 8, []))
    with pytest.raises(ValueError, match="block_size"):
        KVIndex(0)


# -- media: device, host, disk ------------------------------------------------------


def test_a_run_continues_through_any_medium_and_counts_each_block_where_it_is_best() -> None:
    index = KVIndex(BS)
    index.apply("w", stored(1, A[:4]))
    index.apply("w", stored(2, A[4:7], A[3], "host"))
    index.apply("w", stored(3, A[7:], A[6], "disk"))
    assert index.overlaps(A) == {"w": 10}
    assert index.matches(A) == {"w": Overlap(device=4, host=3, disk=3)}
    # A copy higher up wins: A[:6] on disk too changes nothing; A[8] on the
    # device too is a device block.
    index.apply("w", stored(4, A[:6], None, "disk"))
    index.apply("w", stored(5, [A[8]], A[7]))
    assert index.matches(A) == {"w": Overlap(device=5, host=3, disk=2)}
    assert (index.num_blocks("w"), index.num_blocks("w", "host")) == (5, 3)
    assert index.num_blocks("w", "disk") == 9
    assert index.blocks_of("w", "host") == set(A[4:7])
    assert len(index) == 5  # distinct blocks on a device


def test_a_block_moved_down_and_back_up() -> None:
    index = KVIndex(BS)
    index.apply("w", stored(1, A[:6]))
    # offloaded: removed from the device, stored on the host
    index.apply("w", BlocksRemoved(2, A[3:6]))
    index.apply("w", stored(3, A[3:6], A[2], "host"))
    assert index.matches(A[:6]) == {"w": Overlap(device=3, host=3)}
    # to disk, and off the host
    index.apply("w", stored(4, A[4:6], A[3], "disk"))
    index.apply("w", BlocksRemoved(5, A[4:6], "host"))
    assert index.matches(A[:6]) == {"w": Overlap(device=3, host=1, disk=2)}
    # brought back up: stored on the device, gone from disk
    index.apply("w", stored(6, A[3:6], A[2]))
    index.apply("w", BlocksRemoved(7, A[4:6], "disk"))
    assert index.matches(A[:6]) == {"w": Overlap(device=6)}  # (A[3] on the host too)
    assert index.blocks_of("w", "host") == {A[3]}
    # a removal names one medium: the device copy of A[3] alone goes
    index.apply("w", BlocksRemoved(8, [A[3]]))
    assert index.matches(A[:6]) == {"w": Overlap(device=5, host=1)}


def test_a_hole_in_every_medium_ends_the_run() -> None:
    index = KVIndex(BS)
    index.apply("w0", stored(1, A[:3]))
    index.apply("w0", stored(2, A[4:], A[3], "disk"))  # A[3] nowhere
    index.apply("w1", stored(1, A[:2], None, "host"))
    assert index.matches(A) == {"w0": Overlap(device=3), "w1": Overlap(host=2)}
    assert index.overlaps(A) == {"w0": 3, "w1": 2}
    assert index.matches(B) == {} and index.matches([]) == {}


def test_clear_drops_every_medium() -> None:
    index = KVIndex(BS)
    index.apply("w", stored(1, A[:2]))
    index.apply("w", stored(2, A[2:4], A[1], "host"))
    index.apply("w", stored(3, A[4:6], A[3], "disk"))
    index.apply("w", AllCleared(4))
    assert index.matches(A) == {}
    assert [index.num_blocks("w", m) for m in MEDIA] == [0, 0, 0]


def test_a_snapshot_seeds_the_lower_media_and_replaces_them() -> None:
    index = KVIndex(BS)
    index.apply("w", stored(1, B, None, "host"))  # replaced by the snapshot below
    pairs = [(h, A[i - 1] if i else None) for i, h in enumerate(A)]
    snapshot = KVSnapshot(7, BS, pairs[:2], {"host": pairs[2:5], "disk": pairs[5:8]})
    assert index.resync("w", snapshot)
    assert index.matches(A) == {"w": Overlap(device=2, host=3, disk=3)}
    assert index.matches(B) == {}
    assert index.last_event_id("w") == 7
    index.apply("w", stored(8, A[8:], A[7], "disk"))  # events go on from there
    assert index.overlaps(A) == {"w": 10}


def test_weighted_credit_and_the_header() -> None:
    o = Overlap(device=8, host=3, disk=1, predicted=2)
    assert o.blocks == 14
    assert o.credit(0.75, 0.25) == 8 + 2 + 2.25 + 0.25
    assert o.credit(0, 0) == 10
    assert o.describe() == "device=8,host=3,disk=1,predicted=2"
    # capped to a shorter prompt: the least credited blocks go first
    assert o.capped(14) is o
    assert o.capped(11) == Overlap(device=8, host=1, disk=0, predicted=2)
    assert o.capped(7) == Overlap(device=7)


# -- predicted blocks -----------------------------------------------------------------


def predicting(ttl: float = 2.0) -> tuple[KVIndex, FakeClock]:
    clock = FakeClock(100.0)
    return KVIndex(BS, predicted_ttl=ttl, clock=clock), clock


def test_a_routed_prompt_is_predicted_beyond_what_the_device_holds() -> None:
    index, _ = predicting()
    index.apply("w", stored(1, A[:3]))
    assert index.predict("w", A) == 7  # A[:3] are real already
    assert index.matches(A) == {"w": Overlap(device=3, predicted=7)}
    assert index.overlaps(A) == {"w": 10}
    # all of them: those it holds, it keeps in use (a late removal is no news)
    assert index.predicted_of("w") == set(A)
    assert index.num_blocks("w") == 3  # the real ones
    # a worker never heard of before: all predicted, though it has sent no event
    assert index.predict("fresh", B) == 6
    assert index.matches(B) == {"fresh": Overlap(predicted=6)}
    assert index.workers == ["w"]  # (no event stream yet)


def test_its_events_confirm_a_prediction_and_the_rest_expire() -> None:
    index, clock = predicting(ttl=2.0)
    index.predict("w", A)
    clock.now = 101.0
    index.apply("w", stored(1, A[:6]))  # the worker's events catch up
    assert index.matches(A) == {"w": Overlap(device=6, predicted=4)}
    assert index.predicted_of("w") == set(A[6:])
    clock.now = 101.999
    assert index.matches(A) == {"w": Overlap(device=6, predicted=4)}
    clock.now = 102.0  # two seconds after the prediction: the unconfirmed ones go
    assert index.matches(A) == {"w": Overlap(device=6)}
    assert index.predicted_of("w") == set()
    assert index.num_blocks("w") == 6  # the confirmed ones are real, and stay


def test_a_later_prediction_refreshes_the_ttl() -> None:
    index, clock = predicting(ttl=2.0)
    index.predict("w", A[:4])
    clock.now = 101.5
    index.predict("w", A[:2])  # A[:2] again: until 103.5
    clock.now = 102.0
    assert index.matches(A) == {"w": Overlap(predicted=2)}
    assert index.expire(now=103.5) == 2
    assert index.matches(A, now=103.5) == {}


def test_a_block_stored_below_the_device_stays_predicted() -> None:
    """A block moved down may have left the device before the request came:
    only the device's events confirm; the request brings it up."""
    index, _ = predicting()
    index.predict("w", A[:4])
    index.apply("w", stored(1, A[2:4], A[1], "host"))
    assert index.matches(A) == {"w": Overlap(predicted=4)}
    assert index.predicted_of("w") == set(A[:4])


def test_a_removal_clears_a_prediction_once_the_events_caught_up() -> None:
    index, clock = predicting(ttl=5.0)
    index.predict("w", A[:4])  # at 100
    clock.now = 101.0
    index.predict("w", A)  # at 101
    # news older than the requests: it was evicted, then sent a request again
    index.apply("w", BlocksRemoved(1, [A[1]]))
    assert index.matches(A) == {"w": Overlap(predicted=10)}
    index.apply("w", BlocksRemoved(2, [A[0]], "host"))  # below the device: no news for it
    assert index.matches(A) == {"w": Overlap(predicted=10)}
    # the worker stored the first request's blocks: its events have caught up
    # with what was sent at 100 (A[:4] first predicted then), not yet at 101
    index.apply("w", stored(3, A[:2]))  # real now (and predicted again at 101)
    index.apply("w", BlocksRemoved(4, [A[5], A[1]]))
    # A[5], A[1]: predicted at 101, younger than this news: they wait
    assert index.matches(A) == {"w": Overlap(device=1, predicted=9)}
    assert index.num_blocks("w") == 1
    clock.now = 102.0
    index.predict("w", B)  # at 102
    index.apply("w", stored(5, A[4:5], A[3]))  # first predicted at 101: caught up with it
    index.apply("w", BlocksRemoved(6, [A[5], A[0]]))
    # news for what was sent by 101: A[5] and A[0] go, real and predicted
    assert index.matches(A) == {}
    assert index.predicted_of("w") == set(A[1:4]) | set(A[6:]) | set(B)
    assert index.blocks_of("w") == {A[4]}


def test_a_worker_leaving_or_clearing_drops_its_predictions() -> None:
    index, _ = predicting()
    index.predict("w0", A)
    index.predict("w1", A[:4])
    index.apply("w1", stored(1, B))
    index.remove_worker("w0")
    assert index.matches(A) == {"w1": Overlap(predicted=4)}
    index.predict("w2", B[:2])  # takes w0's slot: inherits none of its predictions
    assert index.matches(A) == {"w1": Overlap(predicted=4)}
    assert index.predicted_of("w0") == set()
    index.apply("w1", AllCleared(2))
    assert index.matches(A) == {} and index.matches(B) == {"w2": Overlap(predicted=2)}


def test_a_snapshot_that_holds_a_predicted_block_confirms_it() -> None:
    index, _ = predicting()
    index.predict("w", A[:6])
    pairs = [(h, A[i - 1] if i else None) for i, h in enumerate(A)]
    index.resync("w", KVSnapshot(3, BS, pairs[:2], {"disk": pairs[2:3]}))
    assert index.predicted_of("w") == set(A[2:6])  # (on disk: still to be brought up)
    assert index.matches(A) == {"w": Overlap(device=2, predicted=4)}


def test_each_block_is_credited_the_larger_of_real_and_predicted() -> None:
    index, clock = predicting(ttl=2.0)
    index.apply("w", stored(1, A[:2]))
    index.apply("w", stored(2, A[2:6], A[1], "host"))
    index.apply("w", stored(3, A[6:8], A[5], "disk"))
    index.predict("w", A[:4])  # A[2:4] are on the host: predicted, they count as the device
    o = index.matches(A)["w"]
    assert o == Overlap(device=2, host=2, disk=2, predicted=2)
    assert o.credit(0.75, 0.25) == 2 + 2 + 1.5 + 0.5
    # the larger of: the prediction gone, the host copies count again
    clock.now += 2.0
    assert index.matches(A)["w"] == Overlap(device=2, host=4, disk=2)


def test_no_ttl_predicts_nothing() -> None:
    index = KVIndex(BS, clock=lambda: pytest.fail("the clock is not read"))
    assert index.predict("w", A) == 0
    assert index.matches(A) == {} and index.expire() == 0
    with pytest.raises(ValueError, match="predicted_ttl"):
        KVIndex(BS, predicted_ttl=-1)
    with pytest.raises(ValueError, match="predicted_ttl"):
        KVIndex(BS, predicted_ttl=float("inf"))


# -- overlaps against a brute-force reference ------------------------------------

chains = st.lists(st.integers(0, 3), min_size=0, max_size=12)  # token-ish block labels


def chain_hashes(labels: list[int]) -> list[int]:
    """Chained hashes of blocks whose tokens are [label]*BS: shared label
    prefixes give shared hash prefixes, as real prompts do."""
    return block_hashes([t for lab in labels for t in [lab] * BS], BS)


@settings(max_examples=200, deadline=None)
@given(
    held=st.lists(st.tuples(st.integers(0, 5), chains, st.booleans()), min_size=0, max_size=25),
    prompt=chains,
)
def test_overlaps_match_brute_force(
    held: list[tuple[int, list[int], bool]], prompt: list[int]
) -> None:
    index = KVIndex(BS)
    truth: dict[int, set[int]] = {}
    eids: dict[int, int] = {}
    for worker, labels, remove in held:
        eids[worker] = eids.get(worker, 0) + 1
        hashes = chain_hashes(labels)
        if remove:
            index.apply(worker, BlocksRemoved(eids[worker], hashes[len(hashes) // 2 :]))
            truth.setdefault(worker, set()).difference_update(hashes[len(hashes) // 2 :])
        else:
            index.apply(worker, stored(eids[worker], hashes))
            truth.setdefault(worker, set()).update(hashes)
    query = chain_hashes(prompt)
    expected = {}
    for worker, blocks in truth.items():
        n = 0
        while n < len(query) and query[n] in blocks:
            n += 1
        if n:
            expected[worker] = n
    assert index.overlaps(query) == expected
    for worker, blocks in truth.items():
        assert index.blocks_of(worker) == blocks


@settings(max_examples=200, deadline=None)
@given(
    held=st.lists(
        st.tuples(st.integers(0, 3), chains, st.sampled_from(MEDIA), st.booleans()),
        min_size=0,
        max_size=25,
    ),
    prompt=chains,
)
def test_matches_per_medium_match_brute_force(
    held: list[tuple[int, list[int], Medium, bool]], prompt: list[int]
) -> None:
    index = KVIndex(BS)
    truth: dict[tuple[int, Medium], set[int]] = {}
    eids: dict[int, int] = {}
    for worker, labels, medium, remove in held:
        eids[worker] = eids.get(worker, 0) + 1
        hashes = chain_hashes(labels)
        blocks = truth.setdefault((worker, medium), set())
        if remove:
            index.apply(worker, BlocksRemoved(eids[worker], hashes[len(hashes) // 2 :], medium))
            blocks.difference_update(hashes[len(hashes) // 2 :])
        else:
            index.apply(worker, stored(eids[worker], hashes, None, medium))
            blocks.update(hashes)
    query = chain_hashes(prompt)
    expected = {}
    for worker in eids:
        counts = dict.fromkeys(MEDIA, 0)
        for h in query:
            where = [m for m in MEDIA if h in truth.get((worker, m), ())]
            if not where:
                break
            counts[where[0]] += 1  # MEDIA is best first
        if sum(counts.values()):
            expected[worker] = Overlap(**counts)
    assert index.matches(query) == expected
    assert index.overlaps(query) == {w: o.blocks for w, o in expected.items()}


@settings(max_examples=100, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "discard", "clear", "leave"]), st.integers(0, 4), chains),
        max_size=30,
    ),
    prompt=chains,
)
def test_prefix_map_any_sequence_of_operations(
    ops: list[tuple[str, int, list[int]]], prompt: list[int]
) -> None:
    pm = PrefixMap()
    truth: dict[int, set[int]] = {}
    for op, worker, labels in ops:
        hashes = chain_hashes(labels)
        if op == "add":
            pm.add(worker, hashes)
            truth.setdefault(worker, set()).update(hashes)
        elif op == "discard":
            pm.discard(worker, hashes)
            truth.get(worker, set()).difference_update(hashes)
        elif op == "clear":
            pm.clear(worker)
            if worker in truth:
                truth[worker] = set()
        else:
            pm.remove_worker(worker)
            truth.pop(worker, None)
    query = chain_hashes(prompt)
    expected = {}
    for worker, blocks in truth.items():
        n = next((i for i, h in enumerate(query) if h not in blocks), len(query))
        if n:
            expected[worker] = n
    assert pm.overlaps(query) == expected
    assert len(pm) == len(set().union(*truth.values()))


# -- the real mocker's events keep the index equal to its cache -------------------


async def test_index_follows_a_mocker_cache_through_eviction_and_a_lost_event() -> None:
    from rotor.protocol.engine import EngineRequest, StopParams

    engine = MockerEngine(CARD, TOK, MockerConfig(num_kv_blocks=24, block_size=BS, speedup_ratio=0))
    await engine.start()
    index = KVIndex(BS)
    lost: list[int] = []

    def sink(event) -> None:
        if event.event_id == 5:  # drop one event on the floor
            lost.append(event.event_id)
            return
        if index.apply("m", event) is Applied.GAP:
            index.resync("m", engine.kv_events(sink))

    assert index.resync("m", engine.kv_events(sink))
    try:
        for i in range(12):
            prompt = [3 + (i % 4)] * 20 + [7 + i] * 6  # 4 shared prefixes, evicted in turn
            req = EngineRequest(
                f"r{i}", CARD.name, prompt, stop=StopParams(max_tokens=3, ignore_eos=True)
            )
            async for _ in pulled(engine.generate(req)):
                pass
            await asyncio.sleep(0)
    finally:
        await engine.stop()
    assert lost == [5]
    cache = engine.scheduler.kv
    assert cache.event_id > 5
    assert index.blocks_of("m") == set(cache.hash_to_block)
    assert index.last_event_id("m") == cache.event_id


# -- approximate mode -------------------------------------------------------------


def test_ttl_expiry_with_a_fake_clock() -> None:
    clock = FakeClock(100.0)
    index = ApproxKVIndex(ttl=10.0, clock=clock)
    index.record("w0", A[:6])
    clock.now = 105.0
    index.record("w1", A[:3])
    index.record("w0", A[:2])  # refreshes w0's first two blocks
    assert index.overlaps(A) == {"w0": 6, "w1": 3}
    clock.now = 110.0  # w0's A[2:6] recorded at 100 expire now
    assert index.overlaps(A) == {"w0": 2, "w1": 3}
    assert index.num_blocks("w0") == 2
    clock.now = 114.9
    assert index.overlaps(A) == {"w0": 2, "w1": 3}
    clock.now = 115.0
    assert index.overlaps(A) == {}
    assert len(index) == 0


def test_ttl_explicit_now_and_worker_leaving() -> None:
    index = ApproxKVIndex(ttl=5.0, clock=lambda: pytest.fail("the clock is not read"))
    index.record("w0", B, now=1.0)
    index.record("w1", B[:2], now=2.0)
    index.remove_worker("w0")
    assert index.overlaps(B, now=3.0) == {"w1": 2}
    assert index.expire(now=7.0) == 2
    assert index.overlaps(B, now=7.0) == {}
    with pytest.raises(ValueError, match="ttl"):
        ApproxKVIndex(ttl=0)


def test_approximate_records_count_as_predicted() -> None:
    index = ApproxKVIndex(ttl=5.0, clock=FakeClock(0.0))
    index.record("w", A[:4])
    assert index.matches(A) == {"w": Overlap(predicted=4)}
