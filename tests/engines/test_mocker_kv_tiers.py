"""The mocker's KV tiers below the device (`--host-kv-blocks`, `--disk-kv-blocks`):
what the device evicts moves down (device → host → disk → gone, least recent
first), a prompt's blocks found below are brought back up at their transfer
cost, and the events and the snapshot say where each block sits, so a
replica built from them equals the cache's own view on every medium."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.engines.kv_chains import parents_first, runs
from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.engines.mocker.handover import missing
from rotor.engines.mocker.kv_cache import LOWER, KVCache
from rotor.engines.mocker.scheduler import Scheduler
from rotor.engines.mocker.script import ScriptSource
from rotor.engines.mocker.sequence import Sequence
from rotor.engines.registry import engine_spec
from rotor.protocol import codec
from rotor.protocol.kv import (
    MEDIA,
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KVEvent,
    KVSnapshot,
    Medium,
    block_hashes,
)

from support.clock import FakeClock
from support.mocker import CARD, TOK, MakeEngine, collect, request


def seq(tokens: list[int], rid: str = "r") -> Sequence:
    return Sequence(rid, 0, tokens, ScriptSource([], "eof", 1, None))


class Replica:
    """What a router's index keeps for one worker, per medium, from its events alone."""

    def __init__(self) -> None:
        self.media: dict[str, dict[int, int | None]] = {m: {} for m in MEDIA}
        self.last_id = 0
        self.events: list[KVEvent] = []

    def __call__(self, event: KVEvent) -> None:
        assert event.event_id == self.last_id + 1, "event ids run without gaps"
        self.last_id = event.event_id
        self.events.append(event)
        if isinstance(event, BlocksStored):
            held = self.media[event.medium]
            parent = event.parent_hash
            for h in event.block_hashes:
                assert h not in held, f"stored on {event.medium}, where it already was"
                held[h] = parent
                parent = h
        elif isinstance(event, BlocksRemoved):
            for h in event.block_hashes:
                del self.media[event.medium][h]  # a removed block was there
        else:
            assert isinstance(event, AllCleared)
            for held in self.media.values():
                held.clear()

    @classmethod
    def from_snapshot(cls, snap: KVSnapshot) -> Replica:
        replica = cls()
        replica.last_id = snap.event_id
        lists = {"device": snap.blocks, **snap.lower}
        for medium, pairs in lists.items():
            held = {h for h, _ in pairs}
            for h, parent in pairs:  # parents first, within each medium
                assert parent is None or parent in replica.media[medium] or parent not in held
                replica.media[medium][h] = parent
        return replica


def view(kv: KVCache) -> dict[str, dict[int, int | None]]:
    """The cache's own view: each medium's hashes and their parents."""
    media: dict[str, dict[int, int | None]] = {m: {} for m in MEDIA}
    media["device"] = {h: kv.blocks[b].parent for h, b in kv.hash_to_block.items()}
    for tier in kv.lower:
        media[tier.medium] = dict(tier.blocks)
    return media


def agree(kv: KVCache, replica: Replica) -> None:
    assert replica.media == view(kv)
    assert replica.last_id == kv.event_id
    from_snapshot = Replica.from_snapshot(kv.snapshot())
    assert from_snapshot.media == replica.media
    # (a snapshot crosses NATS as msgpack: it reads back the same)
    assert codec.decode_kv_snapshot(codec.encode_kv_snapshot(kv.snapshot())) == kv.snapshot()
    # the mocker's own rules: one medium per block, and no medium over its room
    sets = [set(held) for held in replica.media.values()]
    assert sum(map(len, sets)) == len(set().union(*sets))
    assert all(len(t.blocks) <= t.capacity for t in kv.lower)


def removed(medium: Medium, *hashes: int) -> tuple[str, str, list[int]]:
    return ("removed", medium, list(hashes))


def stored(
    medium: Medium, hashes: list[int], parent: int | None
) -> tuple[str, str, list[int], int | None]:
    return ("stored", medium, hashes, parent)


def said(events: list[KVEvent]) -> list[tuple[object, ...]]:
    """Events without their ids: what moved where."""
    out: list[tuple[object, ...]] = []
    for e in events:
        if isinstance(e, BlocksStored):
            out.append(stored(e.medium, e.block_hashes, e.parent_hash))
        elif isinstance(e, BlocksRemoved):
            out.append(removed(e.medium, *e.block_hashes))
        else:
            out.append(("cleared",))
    return out


def fill(kv: KVCache, tokens: list[int], rid: str) -> list[int]:
    """A sequence computed and freed (its full blocks cached): their hashes."""
    s = seq(tokens, rid)
    assert kv.allocate(s, len(tokens), kv.match(s))
    kv.free(s)
    return block_hashes(tokens, kv.block_size)


# -- moving down -----------------------------------------------------------------


def test_evicted_blocks_move_down_the_media_least_recent_first() -> None:
    """device → host → disk → gone: each eviction is a removal from one medium
    and a store on the next, and the deepest block of a chain goes first."""
    replica = Replica()
    kv = KVCache(num_blocks=2, block_size=2, listener=replica, host_blocks=2, disk_blocks=2)
    a = fill(kv, [1, 2, 3, 4], "a")
    assert said(replica.events) == [stored("device", a, None)]
    b = fill(kv, [5, 6, 7, 8], "b")  # evicts a's two blocks, tail first
    assert said(replica.events[1:]) == [
        removed("device", a[1], a[0]),
        stored("host", a, None),  # one chain, parents first, whatever the eviction order
        stored("device", b, None),
    ]
    assert list(kv.lower[0].blocks) == [a[1], a[0]]  # a's tail is the host's least recent
    agree(kv, replica)
    c = fill(kv, [9, 9, 9, 9], "c")  # b to the host, pushing a to disk
    assert said(replica.events[4:]) == [
        removed("device", b[1], b[0]),
        removed("host", a[1], a[0]),
        stored("host", b, None),
        stored("disk", a, None),
        stored("device", c, None),
    ]
    agree(kv, replica)
    fill(kv, [0, 0, 0, 0], "d")  # c to the host, b to disk, a gone
    assert said(replica.events[9:13]) == [
        removed("device", c[1], c[0]),
        removed("host", b[1], b[0]),
        stored("host", c, None),
        removed("disk", a[1], a[0]),
    ]
    assert said(replica.events[13:]) == [
        stored("disk", b, None),
        stored("device", block_hashes([0, 0, 0, 0], 2), None),
    ]
    agree(kv, replica)
    assert kv.num_held("host") == 2 and kv.num_held("disk") == 2 and kv.num_held("device") == 0
    assert kv.match(seq([1, 2, 3, 4, 0])) == []  # a is gone from every medium
    assert kv.match(seq([5, 6, 7, 8, 0])) == [LOWER, LOWER]  # b is on disk


def test_a_block_that_passes_through_a_full_host_is_stored_on_disk_only() -> None:
    """Three blocks evicted at once into a host with room for one: the two
    least recent go straight on to disk, never said to be on the host."""
    replica = Replica()
    kv = KVCache(num_blocks=3, block_size=1, listener=replica, host_blocks=1, disk_blocks=4)
    x = fill(kv, [1, 2, 3], "x")
    fill(kv, [7, 7, 7], "y")
    assert (
        said(replica.events[1:4])
        == [
            removed("device", x[2], x[1], x[0]),
            stored("host", [x[0]], None),  # the most recent of the three
            stored("disk", x[1:], x[0]),
        ]
    )
    agree(kv, replica)


def test_a_disk_without_a_host_takes_the_devices_evictions() -> None:
    replica = Replica()
    kv = KVCache(num_blocks=2, block_size=2, listener=replica, disk_blocks=4)
    a = fill(kv, [1, 2, 3, 4], "a")
    fill(kv, [5, 6, 7, 8], "b")
    assert said(replica.events[1:3]) == [removed("device", a[1], a[0]), stored("disk", a, None)]
    assert kv.snapshot().lower == {"disk": [(a[0], None), (a[1], a[0])]}
    agree(kv, replica)


def test_without_tiers_nothing_moves_down() -> None:
    replica = Replica()
    kv = KVCache(num_blocks=2, block_size=2, listener=replica)
    a = fill(kv, [1, 2, 3, 4], "a")
    fill(kv, [5, 6, 7, 8], "b")
    assert said(replica.events[1:]) == [
        removed("device", a[1], a[0]),
        stored("device", block_hashes([5, 6, 7, 8], 2), None),
    ]
    assert kv.snapshot().lower == {} and kv.lower == [] and kv.loaded == {}


# -- bringing back up ----------------------------------------------------------------


def test_a_prefix_found_below_is_brought_up_and_leaves_its_medium() -> None:
    """The device makes room first (its evictions move down), then the
    prompt's blocks leave the host and are stored on the device."""
    replica = Replica()
    kv = KVCache(num_blocks=3, block_size=2, listener=replica, host_blocks=4)
    a = fill(kv, [1, 2, 3, 4], "a")
    b = fill(kv, [5, 6, 7, 8, 9], "b")  # three blocks: a's two move to the host
    assert kv.num_held("host") == 2
    start = len(replica.events)
    p = seq([1, 2, 3, 4, 7], "p")
    hits = kv.match(p)
    assert hits == [LOWER, LOWER]
    assert kv.allocate(p, 5, hits)
    assert said(replica.events[start:]) == [
        removed("device", b[1], b[0]),  # the room for a's two and p's last block
        stored("host", b, None),
        removed("host", a[0], a[1]),
        stored("device", a, None),
    ]
    assert p.block_table[:2] == [kv.hash_to_block[a[0]], kv.hash_to_block[a[1]]]
    assert kv.loaded == {"host": 2} and kv.num_held("host") == 2
    agree(kv, replica)
    kv.free(p)  # cached on the device again
    assert kv.match(seq([1, 2, 3, 4, 0])) == [kv.hash_to_block[a[0]], kv.hash_to_block[a[1]]]


def test_a_prefix_may_span_the_media() -> None:
    """A chain whose first block is on the device and the next ones below it
    is one prefix: every block of it is a hit, and only those below come up."""
    replica = Replica()
    kv = KVCache(num_blocks=5, block_size=1, listener=replica, host_blocks=1, disk_blocks=4)
    h = fill(kv, [1, 2, 3], "x")
    fill(kv, [9, 9, 9, 9], "y")  # x's last two move down: [1, 2] to the host, [1, 2, 3] to disk
    assert list(kv.lower[0].blocks) == [h[1]] and list(kv.lower[1].blocks) == [h[2]]
    keep = seq([1, 5], "keep")  # x's first block, in use on the device
    hits = kv.match(keep)
    assert len(hits) == 1 and kv.allocate(keep, 2, hits)
    where = {m: set(held) for m, held in view(kv).items()}
    assert h[0] in where["device"] and {h[1], h[2]} <= where["host"] | where["disk"]
    p = seq([1, 2, 3, 4], "p")
    hits = kv.match(p)
    assert hits[0] == kv.hash_to_block[h[0]] and hits[1:] == [LOWER, LOWER]
    assert kv.allocate(p, 4, hits)
    assert all(x in kv.hash_to_block for x in h)
    assert sum(kv.loaded.values()) == 2
    agree(kv, replica)


def test_a_block_computed_again_on_the_device_leaves_the_medium_below() -> None:
    """A sequence admitted before its prefix moved down (so it did not match
    it) computes that block itself: the device's copy is the one kept."""
    replica = Replica()
    kv = KVCache(num_blocks=3, block_size=2, listener=replica, host_blocks=4)
    late = seq([1, 2, 3, 4], "late")
    assert kv.allocate(late, 1)  # admitted, nothing full yet
    a = fill(kv, [1, 2, 9], "a")  # [1, 2] registered by `a`
    b = fill(kv, [8, 8, 8, 8], "b")  # a's block moves to the host
    assert list(kv.lower[0].blocks) == [a[0]]
    start = len(replica.events)
    assert kv.allocate(late, 4)  # late fills [1, 2] and [3, 4]
    assert said(replica.events[start:]) == [
        removed("device", b[1]),  # room for late's second block
        stored("host", [b[1]], b[0]),
        stored("device", block_hashes([1, 2, 3, 4], 2), None),
        removed("host", a[0]),
    ]
    agree(kv, replica)


def test_an_allocation_that_cannot_fit_changes_nothing() -> None:
    replica = Replica()
    kv = KVCache(num_blocks=2, block_size=2, listener=replica, host_blocks=4)
    fill(kv, [1, 2, 3, 4], "a")
    fill(kv, [5, 6, 7, 8], "b")  # a to the host
    held = seq([5, 6, 7, 8], "held")
    assert kv.allocate(held, 4, kv.match(held))  # the device is full and in use
    before = (len(replica.events), view(kv))
    p = seq([1, 2, 3, 4, 0], "p")
    hits = kv.match(p)
    assert hits == [LOWER, LOWER]
    assert not kv.allocate(p, 5, hits)
    assert (len(replica.events), view(kv)) == before and p.block_table == []
    assert kv.loaded == {"host": 0}


def test_clear_empties_every_medium() -> None:
    replica = Replica()
    kv = KVCache(num_blocks=2, block_size=2, listener=replica, host_blocks=2, disk_blocks=2)
    for i in range(3):
        fill(kv, [i, i, i, i], f"s{i}")
    assert kv.num_held("host") and kv.num_held("disk")
    kv.clear()
    assert replica.events[-1] == AllCleared(kv.event_id)
    assert kv.num_held("host") == kv.num_held("disk") == 0
    assert kv.snapshot().lower == {"host": [], "disk": []}
    agree(kv, replica)


def test_fetched_blocks_leave_the_medium_below() -> None:
    """A decode worker's fetched blocks (`store`) are registered on the device;
    a copy the host held leaves it."""
    replica = Replica()
    kv = KVCache(num_blocks=2, block_size=2, listener=replica, host_blocks=4)
    a = fill(kv, [1, 2, 3, 4], "a")
    fill(kv, [5, 6, 7, 8], "b")
    start = len(replica.events)
    assert kv.store(a, None) == 2
    assert said(replica.events[start:]) == [
        removed("device", *block_hashes([5, 6, 7, 8], 2)[::-1]),
        stored("host", block_hashes([5, 6, 7, 8], 2), None),
        stored("device", a, None),
        removed("host", *a),
    ]
    agree(kv, replica)


def test_a_decode_worker_fetches_only_what_no_medium_holds() -> None:
    """A prefill's offer: blocks this worker's host holds are not fetched
    (admission brings them up), the rest are."""
    kv = KVCache(num_blocks=2, block_size=2, host_blocks=4)
    prompt = [1, 2, 3, 4, 5, 6, 7]
    fill(kv, [1, 2, 3, 4], "a")
    fill(kv, [8, 8, 8, 8], "b")  # a's blocks to the host
    offered = block_hashes(prompt, 2)
    assert kv.holds(offered[0]) and kv.holds(offered[1]) and not kv.holds(offered[2])
    assert missing(kv, prompt, offered) == (2, offered[2:])


# -- the cost of bringing blocks up ------------------------------------------------------


def test_the_scheduler_charges_a_load_to_the_step_that_admits_it() -> None:
    config = MockerConfig(
        block_size=4, num_kv_blocks=4, host_kv_blocks=8, disk_kv_blocks=8, kv_bytes_per_token=1000
    )
    sched = Scheduler(config)
    first = seq([1] * 12 + [2], "first")
    sched.add(first)
    batch = sched.schedule()
    assert batch.load_ms == 0.0
    sched.advance(batch)
    sched.finish(first)
    filler = seq([3] * 16, "filler")
    sched.add(filler)  # pushes first's three blocks to the host
    sched.advance(sched.schedule())
    sched.finish(filler)
    assert sched.kv.num_held("host") == 3
    again = seq([1] * 12 + [5], "again")
    sched.add(again)
    batch = sched.schedule()
    assert again.cached_tokens == 12  # the host's blocks count as cached
    # 3 blocks × 4 tokens × 1000 bytes at 25 GB/s
    assert batch.load_ms == pytest.approx(3 * 4 * 1000 / 25e9 * 1000)
    assert batch.prefill_tokens == 1  # the rest came up from the host


def test_load_ms_is_bytes_over_each_mediums_bandwidth() -> None:
    config = MockerConfig(block_size=16, host_kv_gbps=25.0, disk_kv_gbps=5.0)
    block = 16 * 131072  # 2 MiB: a Llama-3-8B's block of 16 tokens
    assert config.load_ms("host", 100) == pytest.approx(100 * block / 25e9 * 1000)  # ~8.4 ms
    assert config.load_ms("disk", 100) == pytest.approx(100 * block / 5e9 * 1000)  # ~42 ms
    for bad in ({"host_kv_gbps": 0.0}, {"disk_kv_gbps": 0.0}, {"host_kv_blocks": -1}):
        with pytest.raises(ValueError, match="mocker"):
            MockerConfig(**bad)  # type: ignore[arg-type]


def _recorded(engine: MockerEngine) -> list[float]:
    sleeps: list[float] = []
    clock = FakeClock(100.0)

    async def record(seconds: float) -> None:
        sleeps.append(seconds)
        clock.now += seconds
        await asyncio.sleep(0)

    engine.step_loop.sleep, engine.step_loop.clock = record, clock
    return sleeps


@pytest.mark.parametrize("host_blocks", [256, 0])
async def test_a_prompt_found_below_costs_its_transfer_in_ttft(
    make_engine: MakeEngine, host_blocks: int
) -> None:
    """At a real pace: the prompt's first step (the one that samples its first
    token) sleeps its prefill plus the transfer of its blocks from where they
    sit (the host at 25 GB/s, disk at 5); from the device, its prefill alone."""
    config = {
        "speedup_ratio": 1.0,
        "block_size": 4,
        "num_kv_blocks": 64,
        "host_kv_blocks": host_blocks,
        "disk_kv_blocks": 256,
        "kv_bytes_per_token": 1_000_000,  # 4 MB a block: 0.16 ms from the host, 0.8 from disk
        "prefill_overhead_ms": 1.0,
        "prefill_ms_per_token": 0.0,
    }
    prompt = "<|im_start|>user\n" + " ".join(f"word{i}" for i in range(20)) + "<|im_end|>\n"
    ids = TOK.encode(prompt)
    hashes = block_hashes(ids[: len(ids) - 1], 4)
    script = {"output": "ok", "tokens_per_step": 8}

    async def first_step(engine: MockerEngine) -> tuple[float, int | None]:
        sleeps = _recorded(engine)
        outs = await collect(engine, request(mock=script, prompt=prompt))
        return sleeps[0], outs[0].cached_tokens

    engine = await make_engine(**config)
    cold, cached = await first_step(engine)
    assert cold == pytest.approx(0.001) and cached == 0
    warm, cached = await first_step(engine)  # the device holds the prompt
    assert warm == pytest.approx(0.001) and cached == len(hashes) * 4
    for i in range(6):  # other prompts push it off the device
        other = "<|im_start|>user\n" + " ".join(f"x{i}-{j}" for j in range(20)) + "<|im_end|>\n"
        await collect(engine, request(mock=script, prompt=other))
    kv = engine.scheduler.kv
    where = view(kv)
    on_host = sum(h in where["host"] for h in hashes)
    on_disk = sum(h in where["disk"] for h in hashes)
    # all but the first block, which the other prompts share (their template's opening)
    assert hashes[0] in where["device"] and on_host + on_disk == len(hashes) - 1
    assert on_host == (len(hashes) - 1 if host_blocks else 0)
    below, cached = await first_step(engine)
    assert cached == len(hashes) * 4  # blocks found below count as cached
    assert below == pytest.approx(0.001 + (on_host / 25e9 + on_disk / 5e9) * 4 * 1_000_000)
    state = engine.state()
    assert (state.kv_host_blocks_loaded, state.kv_disk_blocks_loaded) == (on_host, on_disk)
    assert all(h in kv.hash_to_block for h in hashes)


async def test_the_engine_reports_its_media(make_engine: MakeEngine) -> None:
    engine = await make_engine(block_size=4, num_kv_blocks=16, host_kv_blocks=4, disk_kv_blocks=100)
    replica = Replica()
    replica.last_id = engine.kv_events(replica).event_id
    for i in range(4):
        prompt = f"<|im_start|>user\nquestion {i}: " + "why " * 8 + "<|im_end|>\n"
        await collect(engine, request(mock={"output": "ok"}, prompt=prompt))
    state = engine.state()
    kv = engine.scheduler.kv
    assert state.kv_host_blocks == 4 == kv.num_held("host")
    assert state.kv_disk_blocks == kv.num_held("disk") > 0
    assert replica.media == view(kv)
    snap = engine.kv_events(None)
    assert Replica.from_snapshot(snap).media == replica.media
    assert set(snap.lower) == {"host", "disk"}


def test_the_mocker_flags_build_the_tiers() -> None:
    spec = engine_spec("mocker")
    options = {f.dest: f.default for f in spec.flags}
    defaults = spec.build(CARD, TOK, options)
    assert isinstance(defaults, MockerEngine)
    config = defaults.config
    assert (config.host_kv_blocks, config.disk_kv_blocks) == (0, 0)  # off unless asked
    assert (config.host_kv_gbps, config.disk_kv_gbps) == (25.0, 5.0)
    assert defaults.scheduler.kv.lower == []
    options.update(host_kv_blocks=100, disk_kv_blocks=1000, host_kv_gbps=50.0, disk_kv_gbps=2.0)
    engine = spec.build(CARD, TOK, options)
    assert isinstance(engine, MockerEngine)
    kv = engine.scheduler.kv
    assert [(t.medium, t.capacity) for t in kv.lower] == [("host", 100), ("disk", 1000)]
    assert (engine.config.host_kv_gbps, engine.config.disk_kv_gbps) == (50.0, 2.0)


# -- the helpers ----------------------------------------------------------------------------


def test_runs_join_a_chain_in_either_order() -> None:
    assert runs([(3, 2), (2, 1), (1, None)]) == [([1, 2, 3], None)]
    assert runs([(1, None), (2, 1), (3, 2)]) == [([1, 2, 3], None)]
    assert runs([(2, 1), (9, 8), (3, 2)]) == [([2], 1), ([9], 8), ([3], 2)]
    assert runs([]) == []
    assert parents_first({3: 2, 2: 1, 1: None, 7: 5}) == [(1, None), (7, 5), (2, 1), (3, 2)]


# -- random workloads through the scheduler ---------------------------------------------

BASES = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [1, 2, 3, 4, 20, 21, 22, 23, 24], [30] * 12]


@settings(max_examples=60, deadline=None)
@given(
    st.randoms(use_true_random=False),
    st.integers(1, 4),
    st.integers(3, 8),
    st.integers(2, 16),
    st.integers(0, 4),
    st.integers(0, 4),
)
def test_random_workloads_keep_the_replica_exact_on_every_medium(
    rng: random.Random, block_size: int, num_blocks: int, budget: int, host: int, disk: int
) -> None:
    """Admission (hits on every medium), chunked prefill, decode, eviction down
    the media, bringing up, preemption, finishing and the odd clear, checked
    after every operation against the events and the snapshot; every hit a
    prompt is told of is on some medium, and counts as cached."""
    replica = Replica()
    sched = Scheduler(
        MockerConfig(
            block_size=block_size,
            num_kv_blocks=num_blocks,
            max_num_batched_tokens=budget,
            host_kv_blocks=host,
            disk_kv_blocks=disk,
        )
    )
    kv = sched.kv
    kv.listener = replica
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
            loaded = sum(kv.loaded.values())
            batch = sched.schedule()
            assert (batch.load_ms > 0) == (sum(kv.loaded.values()) > loaded)
            for s in sched.advance(batch):
                s.token_ids.append(rng.choice((40, 41, 1)))
                if s.num_generated >= 8:
                    sched.finish(s)
        elif roll < 0.99:
            if live:
                sched.finish(rng.choice(live))
        else:
            kv.clear()
        for s in live:
            hashes = block_hashes(s.token_ids, block_size)
            truth.update(zip(hashes, [None, *hashes], strict=False))
        agree(kv, replica)
        for held in replica.media.values():
            assert all(truth[h] == parent for h, parent in held.items())
