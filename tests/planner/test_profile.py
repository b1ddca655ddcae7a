"""The planner's profile: its file, and what it answers between and beyond
the measured points."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rotor.planner.profile import DecodePoint, PrefillPoint, Profile

CONCURRENCIES = (1, 8, 32)
CONTEXTS = (1000, 4000)


def grid_itl(c: float, ctx: float) -> float:
    """A bilinear ITL (cross term included): interpolation must reproduce it exactly."""
    return 0.01 + 0.0005 * c + 2e-6 * ctx + 1e-7 * c * ctx


def make_profile() -> Profile:
    return Profile(
        model="m",
        prefill=[PrefillPoint(1000, 0.1), PrefillPoint(100, 0.02), PrefillPoint(4000, 0.4)],
        decode=[DecodePoint(c, ctx, grid_itl(c, ctx)) for c in CONCURRENCIES for ctx in CONTEXTS],
        meta={"engine": "mocker", "gpus": 1},
    )


# -- the file ---------------------------------------------------------------------


def test_json_round_trip() -> None:
    p = make_profile()
    data = p.to_json()
    assert data["version"] == 1
    assert data["model"] == "m"
    assert data["meta"] == {"engine": "mocker", "gpus": 1}
    assert data["prefill"][0] == {"isl": 1000, "ttft_s": 0.1}
    assert set(data["decode"][0]) == {"concurrency", "context", "itl_s"}
    back = Profile.from_json(json.loads(json.dumps(data)))
    assert back == p


def test_file_round_trip(tmp_path: Path) -> None:
    p = make_profile()
    path = str(tmp_path / "profile.json")
    p.save(path)
    assert json.loads(Path(path).read_text())["version"] == 1
    assert Profile.load(path) == p
    assert [f.name for f in tmp_path.iterdir()] == ["profile.json"]  # no temp file left


def test_meta_is_optional() -> None:
    data = make_profile().to_json()
    del data["meta"]
    assert Profile.from_json(data).meta == {}


def broken(edit: Any) -> dict[str, Any]:
    data = copy.deepcopy(make_profile().to_json())
    edit(data)
    return data


INVALID = [
    (lambda d: d.pop("version"), "missing field 'version'"),
    (lambda d: d.update(version=2), "unknown version 2"),
    (lambda d: d.update(version=True), "unknown version True"),
    (lambda d: d.pop("model"), "missing field 'model'"),
    (lambda d: d.update(model=""), "'model' must be a non-empty string"),
    (lambda d: d.update(meta=[]), "'meta' must be an object"),
    (lambda d: d.pop("prefill"), "missing field 'prefill'"),
    (lambda d: d.update(prefill=[]), "'prefill' is empty"),
    (lambda d: d.update(decode=[]), "'decode' is empty"),
    (lambda d: d.update(decode={}), "'decode' must be a list"),
    (lambda d: d["prefill"].append(3), "prefill[3]: expected an object, got int"),
    (lambda d: d["prefill"][1].pop("isl"), "prefill[1]: missing field 'isl'"),
    (lambda d: d["prefill"][1].update(isl=0), "prefill[1].isl: must be positive, got 0"),
    (lambda d: d["prefill"][1].update(isl=1.5), "prefill[1].isl: must be an integer"),
    (lambda d: d["prefill"][0].update(ttft_s=-0.1), "prefill[0].ttft_s: must be positive"),
    (lambda d: d["prefill"][0].update(ttft_s="1"), "prefill[0].ttft_s: must be a number"),
    (lambda d: d["decode"][2].pop("itl_s"), "decode[2]: missing field 'itl_s'"),
    (lambda d: d["decode"][2].update(concurrency=-1), "decode[2].concurrency: must be positive"),
    (lambda d: d["decode"][4].update(context=0), "decode[4].context: must be positive"),
    (lambda d: d["decode"][5].update(itl_s=0), "decode[5].itl_s: must be positive"),
    (lambda d: d["decode"][5].update(itl_s=float("inf")), "decode[5].itl_s: must be positive"),
]


@pytest.mark.parametrize(("edit", "message"), INVALID)
def test_invalid_json(edit: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Profile.from_json(broken(edit))


def test_not_an_object() -> None:
    with pytest.raises(ValueError, match="expected a JSON object, got list"):
        Profile.from_json([])


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(ValueError, match=f"profile {missing}: .*No such file"):
        Profile.load(str(missing))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(ValueError, match=f"profile {garbage}: "):
        Profile.load(str(garbage))
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps(broken(lambda d: d.update(decode=[]))))
    with pytest.raises(ValueError, match=f"profile {invalid}: 'decode' is empty"):
        Profile.load(str(invalid))


# -- prefill ----------------------------------------------------------------------


def test_ttft_exact_at_points_and_linear_between() -> None:
    p = make_profile()
    assert p.ttft(100) == pytest.approx(0.02)
    assert p.ttft(1000) == pytest.approx(0.1)
    assert p.ttft(4000) == pytest.approx(0.4)
    assert p.ttft(550) == pytest.approx(0.06)  # halfway between 100 and 1000
    assert p.ttft(2500) == pytest.approx(0.25)


def test_ttft_extrapolation() -> None:
    p = make_profile()
    # beyond the longest: the last two points' line (0.1 s per 1000 tokens)
    assert p.ttft(8000) == pytest.approx(0.8)
    # below the shortest: the first two points' line, floored at the smallest TTFT
    assert p.ttft(50) == pytest.approx(0.02)
    assert p.ttft(0) == pytest.approx(0.02)


def test_ttft_never_falls_beyond_the_longest() -> None:
    # a noisy top point (shorter than the one before) does not make longer prompts faster
    p = Profile(
        "m", [PrefillPoint(100, 0.05), PrefillPoint(1000, 0.2), PrefillPoint(2000, 0.18)], []
    )
    assert p.ttft(5000) == pytest.approx(0.18)


def test_ttft_one_point_is_proportional() -> None:
    p = Profile("m", [PrefillPoint(1000, 0.1)], [])
    assert p.ttft(3000) == pytest.approx(0.3)
    assert p.ttft(500) == pytest.approx(0.1)  # never below the measured one
    assert p.prefill_throughput(3000) == pytest.approx(10000.0)


def test_ttft_duplicates_averaged() -> None:
    p = Profile(
        "m", [PrefillPoint(100, 0.02), PrefillPoint(100, 0.04), PrefillPoint(200, 0.05)], []
    )
    assert p.ttft(100) == pytest.approx(0.03)


def test_prefill_throughput() -> None:
    p = make_profile()
    assert p.prefill_throughput(1000) == pytest.approx(10000.0)
    assert p.prefill_throughput(100) == pytest.approx(5000.0)
    assert p.prefill_throughput(0) == 0.0


def test_empty_profile_says_so() -> None:
    p = Profile("m", [], [])
    with pytest.raises(ValueError, match="no prefill points"):
        p.ttft(100)
    with pytest.raises(ValueError, match="no decode points"):
        p.itl(1, 100)


# -- decode -----------------------------------------------------------------------


def test_itl_exact_at_grid_points() -> None:
    p = make_profile()
    for c in CONCURRENCIES:
        for ctx in CONTEXTS:
            assert p.itl(c, ctx) == pytest.approx(grid_itl(c, ctx), rel=1e-12)


def test_itl_bilinear_between() -> None:
    p = make_profile()
    for c, ctx in [(4.5, 1000), (20, 4000), (8, 2500), (3, 1500), (30, 3999)]:
        assert p.itl(c, ctx) == pytest.approx(grid_itl(c, ctx), rel=1e-12)


def test_itl_extrapolates_in_concurrency() -> None:
    p = make_profile()
    # the function is linear in c, so the last segment's line is the function itself
    assert p.itl(100, 1000) == pytest.approx(grid_itl(100, 1000), rel=1e-12)
    assert p.itl(64, 2500) == pytest.approx(grid_itl(64, 2500), rel=1e-12)


def test_itl_extrapolates_in_context() -> None:
    p = make_profile()
    assert p.itl(8, 8000) == pytest.approx(grid_itl(8, 8000), rel=1e-12)
    # below the shortest context: never below the smallest row's value
    assert p.itl(8, 10) == pytest.approx(grid_itl(8, 1000), rel=1e-12)


def test_itl_ragged_grid() -> None:
    # context 1000 measured at 1, 4, 16; context 3000 at 1 and 8 only
    p = Profile(
        "m",
        [PrefillPoint(100, 0.01)],
        [
            DecodePoint(1, 1000, 0.010),
            DecodePoint(4, 1000, 0.016),
            DecodePoint(16, 1000, 0.040),
            DecodePoint(1, 3000, 0.020),
            DecodePoint(8, 3000, 0.034),
        ],
    )
    assert p.itl(4, 1000) == pytest.approx(0.016)
    assert p.itl(8, 3000) == pytest.approx(0.034)
    # each row answers for itself at c = 8, then the rows blend: row 1000 → 0.024, row 3000 → 0.034
    assert p.itl(8, 1000) == pytest.approx(0.024)
    assert p.itl(8, 2000) == pytest.approx(0.029)
    # row 3000 beyond its largest concurrency (8): its last segment, 0.002 per stream
    assert p.itl(16, 3000) == pytest.approx(0.050)
    assert p.itl(16, 2000) == pytest.approx(0.045)


def test_itl_single_row_is_flat_in_context() -> None:
    p = Profile("m", [], [DecodePoint(1, 1000, 0.01), DecodePoint(10, 1000, 0.028)])
    assert p.itl(5, 50) == pytest.approx(0.018)
    assert p.itl(5, 9000) == pytest.approx(0.018)


def linear_decode() -> Profile:
    # itl(c) = 0.012 + 0.0005 c at every context
    return Profile(
        "m",
        [PrefillPoint(100, 0.01)],
        [DecodePoint(c, 1000, 0.012 + 0.0005 * c) for c in (1, 8, 32)],
    )


def test_decode_capacity_exact() -> None:
    c, tps = linear_decode().decode_capacity(0.02, 1000)
    assert c == pytest.approx(16.0, rel=1e-5)
    assert tps == pytest.approx(16.0 / 0.02, rel=1e-5)


def test_decode_capacity_capped_at_four_times_the_largest_measured() -> None:
    c, tps = linear_decode().decode_capacity(10.0, 1000)
    assert c == 128.0
    assert tps == pytest.approx(128.0 / (0.012 + 0.0005 * 128))


def test_decode_capacity_monotone_in_target() -> None:
    p = make_profile()
    last_c, last_tps = 0.0, 0.0
    for i in range(1, 200):
        target = 0.005 * i * 0.05 + 0.01
        c, tps = p.decode_capacity(target, 2500)
        assert c >= last_c
        assert tps >= last_tps
        assert p.itl(c, 2500) <= target * (1 + 1e-9) or c == 1.0
        last_c, last_tps = c, tps
    assert last_c > 1.0


def test_decode_capacity_when_one_stream_misses() -> None:
    c, tps = linear_decode().decode_capacity(0.01, 1000)
    assert c == 1.0
    assert tps == pytest.approx(1.0 / 0.0125)


def test_decode_capacity_ignores_a_dip_beyond_a_miss() -> None:
    # a noisy sweep: 16 streams measured faster than 8; a target 8 misses
    # does not jump to 16 and beyond
    p = Profile(
        "m",
        [],
        [
            DecodePoint(1, 1000, 0.010),
            DecodePoint(8, 1000, 0.030),
            DecodePoint(16, 1000, 0.020),
            DecodePoint(32, 1000, 0.060),
        ],
    )
    c, _ = p.decode_capacity(0.025, 1000)
    # itl rises 0.010 → 0.030 over 1..8: it reaches 0.025 at c = 1 + 7 · 0.75
    assert c == pytest.approx(6.25, rel=1e-5)
