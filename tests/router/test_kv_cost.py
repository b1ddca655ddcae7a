"""The KV cost: hand-computed cases, tie-breaking, temperature sampling, the explanation;
the overlap weighted by where its blocks sit (device, predicted, host, disk)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from rotor.router.kv_cost import KVCost, WorkerLoad
from rotor.router.kv_index import Overlap

BS = 16


def test_hand_computed_costs() -> None:
    cost = KVCost(BS, overlap_weight=2.0)
    loads = {
        "a": WorkerLoad(active_decode_blocks=100, pending_prefill_tokens=160, queue_length=1),
        "b": WorkerLoad(active_decode_blocks=0),
        "c": WorkerLoad(active_decode_blocks=30, pending_prefill_tokens=8),
    }
    d = cost.choose(50, {"a": 48, "c": 10, "gone": 50}, loads)
    by = {c.worker: c for c in d.candidates}
    # a: 2 * (50 - 48 + 160/16) + 100 = 124
    assert by["a"].cost == 124
    assert (by["a"].new_prefill_blocks, by["a"].pending_prefill_blocks) == (2, 10)
    # b: 2 * 50 + 0 = 100
    assert by["b"].cost == 100
    # c: 2 * (40 + 0.5) + 30 = 111
    assert by["c"].cost == 111
    assert d.worker == "b" and d.overlap_blocks == 0 and d.prompt_blocks == 50
    assert [c.worker for c in d.candidates] == ["b", "c", "a"]  # cheapest first
    assert "gone" not in by  # not live
    assert not d.sampled


def test_overlap_beyond_the_prompt_is_capped() -> None:
    d = KVCost(BS, overlap_weight=1.0).choose(3, {"a": 9}, {"a": WorkerLoad()})
    assert d.overlap_blocks == 3 and d.candidates[0].cost == 0


def test_weight_trades_hits_against_load() -> None:
    loads = {"hit": WorkerLoad(active_decode_blocks=100), "idle": WorkerLoad()}
    overlaps = {"hit": 93}
    # 1 * (94 - 93) + 100 = 101 > 94: the idle worker wins at weight 1 ...
    assert KVCost(BS, overlap_weight=1.0).choose(94, overlaps, loads).worker == "idle"
    # ... 4 * 1 + 100 = 104 < 376: the cached one at weight 4.
    d = KVCost(BS, overlap_weight=4.0).choose(94, overlaps, loads)
    assert d.worker == "hit" and d.header == "93"


def test_ties_go_to_the_lesser_load_then_queue_then_worker_id() -> None:
    cost = KVCost(BS, overlap_weight=1.0)
    # Equal cost 20: x = 1*(10 + 0) + 10, y = 1*(10 + 5) + 5 (load 10 vs 10), z = 20 + 0.
    loads = {
        "x": WorkerLoad(active_decode_blocks=10),
        "y": WorkerLoad(active_decode_blocks=5, pending_prefill_tokens=80),
        "z": WorkerLoad(active_decode_blocks=0),
    }
    d = cost.choose(20, {"x": 10, "y": 10}, loads)
    assert [c.cost for c in d.candidates] == [20, 20, 20]
    assert d.worker == "z"  # load 0 < 10
    loads.pop("z")
    assert cost.choose(20, {"x": 10, "y": 10}, loads).worker == "x"  # equal load: by id
    loads["x"] = WorkerLoad(active_decode_blocks=10, queue_length=2)
    assert cost.choose(20, {"x": 10, "y": 10}, loads).worker == "y"  # shorter queue
    idle = {w: WorkerLoad() for w in (3, 1, 2)}
    assert KVCost(BS).choose(5, {}, idle).worker == 1


def test_temperature_samples_by_softmax_of_normalised_costs() -> None:
    loads = {
        "a": WorkerLoad(),
        "b": WorkerLoad(active_decode_blocks=50),
        "c": WorkerLoad(active_decode_blocks=100),
    }
    cost = KVCost(BS, overlap_weight=1.0, temperature=0.5, rng=random.Random(3))
    d = cost.choose(10, {}, loads)
    assert d.sampled
    # normalised costs 0, 0.5, 1 -> weights 1, e^-1, e^-2
    total = 1 + math.exp(-1) + math.exp(-2)
    assert cost.probabilities(d.candidates) == pytest.approx(
        [1 / total, math.exp(-1) / total, math.exp(-2) / total]
    )
    picks = Counter(cost.choose(10, {}, loads).worker for _ in range(6000))
    assert picks["a"] / 6000 == pytest.approx(1 / total, abs=0.03)
    assert picks["c"] / 6000 == pytest.approx(math.exp(-2) / total, abs=0.03)
    # The same seed gives the same picks.
    again = KVCost(BS, overlap_weight=1.0, temperature=0.5, rng=random.Random(3))
    first = KVCost(BS, overlap_weight=1.0, temperature=0.5, rng=random.Random(3))
    assert [again.choose(10, {}, loads).worker for _ in range(50)] == [
        first.choose(10, {}, loads).worker for _ in range(50)
    ]


def test_equal_costs_are_equally_likely_with_temperature() -> None:
    cost = KVCost(BS, temperature=1.0, rng=random.Random(0))
    loads = {w: WorkerLoad() for w in "abcd"}
    assert cost.probabilities(cost.choose(4, {}, loads).candidates) == [0.25] * 4
    picks = Counter(cost.choose(4, {}, loads).worker for _ in range(4000))
    assert set(picks) == set("abcd") and min(picks.values()) > 850


def test_decision_explains_itself() -> None:
    d = KVCost(BS, overlap_weight=2.0).choose(
        10, {"w1": 8}, {"w1": WorkerLoad(5, 32, 1), "w2": WorkerLoad()}
    )
    line = d.log_line()
    assert line.startswith("kv route -> w1 (cheapest) overlap 8/10 blocks")
    assert "w1: cost=13 overlap=8 prefill=2+2 decode=5 queue=1" in line
    assert "w2: cost=20 overlap=0 prefill=10+0 decode=0 queue=0" in line
    assert d.header == "8"


def test_a_lower_mediums_blocks_count_their_weight() -> None:
    cost = KVCost(BS, overlap_weight=1.0)  # host 0.75, disk 0.25 by default
    loads = {w: WorkerLoad() for w in ("device", "host", "disk", "predicted")}
    overlaps = {
        "device": Overlap(device=6),  # credit 6: 4 blocks to compute
        "host": Overlap(device=2, host=8),  # 2 + 6 = 8: 2 blocks' work (8 moved up at 1/4 each)
        "disk": Overlap(device=2, disk=8),  # 2 + 2 = 4
        "predicted": Overlap(device=1, predicted=6),  # a prediction counts as the device: 7
    }
    d = cost.choose(10, overlaps, loads)
    by = {c.worker: c for c in d.candidates}
    assert {w: c.new_prefill_blocks for w, c in by.items()} == {
        "device": 4,
        "host": 2,
        "disk": 6,
        "predicted": 3,
    }
    assert [c.worker for c in d.candidates] == ["host", "predicted", "device", "disk"]
    assert d.worker == "host" and d.overlap_blocks == 10 and d.header == "10"
    assert d.tiers == Overlap(device=2, host=8)
    assert d.tiers_header == "device=2,host=8,disk=0,predicted=0"
    # weights of 0: only the device's blocks count (the run still says 10 blocks)
    flat = KVCost(BS, overlap_weight=1.0, host_weight=0, disk_weight=0)
    assert flat.choose(10, overlaps, loads).worker == "predicted"
    assert flat.credit(Overlap(device=2, host=8)) == 2


def test_tiers_in_the_explanation() -> None:
    d = KVCost(BS, overlap_weight=1.0).choose(
        10,
        {"w1": Overlap(device=4, host=2, predicted=3), "w2": Overlap(disk=4)},
        {"w1": WorkerLoad(), "w2": WorkerLoad()},
    )
    line = d.log_line()
    assert line.startswith(
        "kv route -> w1 (cheapest) overlap 9/10 blocks (device=4,host=2,disk=0,predicted=3) | "
    )
    assert "w1: cost=1.5 overlap=9 [host=2 predicted=3] prefill=1.5+0 decode=0" in line
    assert "w2: cost=9 overlap=4 [disk=4] prefill=9+0 decode=0" in line


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="no live worker"):
        KVCost(BS).choose(3, {"a": 1}, {})
    with pytest.raises(ValueError, match="overlap_weight"):
        KVCost(BS, overlap_weight=-1)
    with pytest.raises(ValueError, match="temperature"):
        KVCost(BS, temperature=float("nan"))
    with pytest.raises(ValueError, match="block_size"):
        KVCost(0)
    with pytest.raises(ValueError, match="prompt_blocks"):
        KVCost(BS).choose(-1, {}, {"a": WorkerLoad()})
    with pytest.raises(ValueError, match="disk <= host <= 1"):
        KVCost(BS, host_weight=1.5)
    with pytest.raises(ValueError, match="host 0.5, disk 0.75"):
        KVCost(BS, host_weight=0.5, disk_weight=0.75)
    with pytest.raises(ValueError, match="0 <= disk"):
        KVCost(BS, disk_weight=-0.1)
