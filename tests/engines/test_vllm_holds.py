"""A vLLM prefill worker's stored hand-overs (engines/vllm/holds.py), on a
clock of the test's own: held until loaded (the connector deletes the
folder), dropped, or past the hold timeout (deleted and counted)."""

from __future__ import annotations

from pathlib import Path

from rotor.engines.vllm.holds import StoredHolds


def stored(root: Path, key: str) -> None:
    (root / key).mkdir(parents=True)
    (root / key / "model.layers.0.self_attn.attn.safetensors").write_bytes(b"kv")


def test_a_hand_over_is_held_until_loaded_dropped_or_timed_out(tmp_path: Path) -> None:
    now = [0.0]
    holds = StoredHolds(str(tmp_path), 30.0, clock=lambda: now[0])
    for key in ("loaded", "dropped", "late"):
        stored(tmp_path, key)
    holds.hold("loaded", 3)
    holds.hold("dropped", 2)
    now[0] = 10.0
    holds.hold("late", 5)
    assert holds.pinned() == 10
    # the decode worker's connector loads one (and deletes it): no longer held
    (tmp_path / "loaded" / "model.layers.0.self_attn.attn.safetensors").unlink()
    (tmp_path / "loaded").rmdir()
    assert holds.pinned() == 7
    # the frontend drops one: deleted now; a key it never held is not its own
    assert holds.release("dropped") and not (tmp_path / "dropped").exists()
    assert not holds.release("never-held")
    assert holds.pinned() == 5
    # the last one's deadline is 40: not before
    # (a timer that woke early, as uvloop's do, is told how long to wait again)
    now[0] = 39.9
    assert holds.expire() == 40.0 - 39.9
    assert (tmp_path / "late").exists() and holds.timeouts == 0
    now[0] = 40.0
    assert holds.expire() is None
    assert not (tmp_path / "late").exists() and holds.timeouts == 1
    assert holds.pinned() == 0


def test_a_loaded_hand_over_is_not_counted_as_timed_out(tmp_path: Path) -> None:
    now = [0.0]
    holds = StoredHolds(str(tmp_path), 5.0, clock=lambda: now[0])
    holds.hold("gone", 1)  # (its folder already loaded and deleted)
    now[0] = 6.0
    holds.expire()
    assert holds.timeouts == 0 and holds.pinned() == 0


def test_no_timeout_holds_until_loaded_or_dropped(tmp_path: Path) -> None:
    now = [0.0]
    holds = StoredHolds(str(tmp_path), 0.0, clock=lambda: now[0])
    stored(tmp_path, "k")
    holds.hold("k", 4)
    now[0] = 1e9
    assert holds.expire() is None  # nothing to wait for
    assert holds.pinned() == 4 and holds.timeouts == 0
    assert holds.release("k") and holds.pinned() == 0
