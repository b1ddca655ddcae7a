"""`rotor planner profile` end to end: the command against a real `rotor run
out=mocker` whose cost model runs at real speed (speedup 1), so that what it
measures must follow that model: TTFT grows with the prompt, ITL with the
streams decoding together. Plus the command's errors, and the steady-window
rule on records made by hand."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from rotor.bench.profiling import (
    HEAD_WORDS,
    add_arguments,
    decode_contexts,
    main,
    parse_list,
    steady_itls,
)
from rotor.planner.profile import Profile

from support.server import Server, free_port, rotor_server

pytestmark = pytest.mark.e2e

# The mocker's cost model, in ms: a prefill step 2 + 0.05 a token, a decode
# step 4 + 2 for each sequence beyond the first. At speedup 1 it sleeps that
# long each step, so these are floors of what a client sees.
PREFILL_OVERHEAD_MS, PREFILL_MS_PER_TOKEN = 2.0, 0.05
DECODE_MS_PER_STEP, DECODE_MS_PER_SEQ = 4.0, 2.0
COST = (
    "--speedup-ratio",
    "1",
    "--prefill-overhead-ms",
    str(PREFILL_OVERHEAD_MS),
    "--prefill-ms-per-token",
    str(PREFILL_MS_PER_TOKEN),
    "--decode-ms-per-step",
    str(DECODE_MS_PER_STEP),
    "--decode-ms-per-seq",
    str(DECODE_MS_PER_SEQ),
)
ISLS, CONCURRENCIES, OSL = (64, 512), (1, 8), 16


def step_ms(streams: int) -> float:
    return DECODE_MS_PER_STEP + DECODE_MS_PER_SEQ * (streams - 1)


def profile_cmd(*argv: str) -> int:
    """The command in this process, as `rotor planner profile ARGV` runs it."""
    parser = argparse.ArgumentParser(prog="rotor planner profile")
    add_arguments(parser)
    return main(parser.parse_args(list(argv)))


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", *COST) as srv:
        yield srv


@pytest.fixture(scope="module")
def measured(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Profile:
    """One profile of the mocker on a tiny grid, shared by the tests that read it."""
    out = tmp_path_factory.mktemp("profile") / "profile.json"
    rc = profile_cmd(
        "--url",
        server.v1,
        "--out",
        str(out),
        "--isl",
        ",".join(map(str, ISLS)),
        "--concurrency",
        ",".join(map(str, CONCURRENCIES)),
        "--osl",
        str(OSL),
        "--requests",
        "6",
        "--quiet",
    )
    assert rc == 0
    return Profile.load(str(out))


def test_one_prefill_point_per_isl_and_decode_at_each_concurrency_and_context(
    measured: Profile,
) -> None:
    assert measured.model == "mock-model"
    assert [p.isl for p in measured.prefill] == list(ISLS)
    contexts = [isl + OSL // 2 for isl in decode_contexts(ISLS)]
    assert contexts == [72, 520]
    got = sorted((d.context, d.concurrency) for d in measured.decode)
    assert got == sorted((ctx, c) for ctx in contexts for c in CONCURRENCIES)


def test_ttft_grows_with_the_prompt(measured: Profile) -> None:
    short, long = (p.ttft_s for p in measured.prefill)
    points = [p for p in measured.meta["points"] if p["kind"] == "prefill"]
    long_tokens = points[1]["prompt_tokens"]
    floor = (PREFILL_OVERHEAD_MS + PREFILL_MS_PER_TOKEN * long_tokens) / 1e3
    assert long >= 0.9 * floor, (long, floor)
    # the model's difference is 0.05 ms × ~450 tokens ≈ 22 ms: at least half of it
    extra = PREFILL_MS_PER_TOKEN * (long_tokens - points[0]["prompt_tokens"]) / 1e3
    assert long - short >= 0.5 * extra, (short, long)
    # every prompt its own text: no prefill was the cache's
    assert all(p["cached_tokens"] == 0 for p in points), points


def test_itl_grows_with_the_streams(measured: Profile) -> None:
    itl = {(d.context, d.concurrency): d.itl_s for d in measured.decode}
    for ctx in {d.context for d in measured.decode}:
        one, eight = itl[ctx, 1], itl[ctx, 8]
        assert one >= 0.9 * step_ms(1) / 1e3, one
        assert eight >= 0.9 * step_ms(8) / 1e3, eight
        # the model's difference is 14 ms a step: at least half of it
        assert eight - one >= 0.5 * (step_ms(8) - step_ms(1)) / 1e3, (ctx, one, eight)
    decode = [p for p in measured.meta["points"] if p["kind"] == "decode"]
    assert all(p["steady"] for p in decode), decode
    for p in decode:  # closed loop: c in flight, every answer --osl tokens (ignore_eos)
        assert p["max_in_flight"] == p["concurrency"], p
        assert p["output_tokens"] == p["requests"] * OSL, p


def test_meta_says_how_it_was_measured(measured: Profile, server: Server) -> None:
    meta = measured.meta
    assert meta["url"] == server.v1 and meta["model"] == "mock-model"
    assert meta["engine"] == "rotor" and meta["max_model_len"] > 0
    assert meta["rotor_version"]
    assert datetime.fromisoformat(meta["date"]).utcoffset() is not None
    assert meta["isl"] == list(ISLS) and meta["concurrency"] == list(CONCURRENCIES)
    assert meta["osl"] == OSL and meta["requests"] == 6 and meta["ignore_eos"] is True
    assert meta["tokens_per_word"] > 0
    for p in (p for p in meta["points"] if p["kind"] == "prefill"):
        assert p["requests"] == 6
        # prompts fitted to the server's count: the asked length, but for each
        # one's own opening words, fitted on other words (the mock tokenizer
        # spends ~5 tokens a word, so 3 words vary by ±10)
        head = HEAD_WORDS * meta["tokens_per_word"]
        assert abs(p["prompt_tokens"] - p["isl"]) <= 0.03 * p["isl"] + head, p


def test_prints_the_table_unless_quiet(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    argv = ("--url", server.v1, "--out", str(out), "--isl", "32", "--concurrency", "2")
    assert profile_cmd(*argv, "--osl", "4", "--requests", "1") == 0
    text = capsys.readouterr().out
    assert "prefill isl 32" in text and "decode c=2" in text and "TTFT" in text
    assert f"profile: {out}" in text
    assert Profile.load(str(out)).prefill[0].isl == 32
    assert profile_cmd(*argv, "--osl", "4", "--requests", "1", "--quiet") == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("flag", "value", "why"),
    [
        ("--isl", "64,abc", "'abc' is not a whole number"),
        ("--isl", "64,,512", "empty item"),
        ("--isl", "0,64", "must be positive"),
        ("--concurrency", "1,-2", "must be positive"),
        ("--osl", "1", "at least 2"),
        ("--requests", "x", "'x' is not a whole number"),
    ],
)
def test_a_bad_flag_is_exit_2_and_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, why: str
) -> None:
    out = tmp_path / "p.json"
    # the URL is never asked: the flags are checked first
    rc = profile_cmd("--url", f"http://127.0.0.1:{free_port()}/v1", "--out", str(out), flag, value)
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"rotor planner profile: {flag}: ") and why in err, err
    assert err.count("\n") == 1 and not out.exists()


def test_an_unreachable_server_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    rc = profile_cmd("--url", f"http://127.0.0.1:{free_port()}/v1", "--out", str(out))
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("rotor planner profile: cannot reach the server"), err
    assert not out.exists()


def test_a_server_answering_errors_is_exit_2(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    rc = profile_cmd("--url", server.v1, "--model", "no-such-model", "--out", str(out))
    err = capsys.readouterr().err
    assert rc == 2 and "answered an error (http_404)" in err, err
    assert not out.exists()


def test_prompts_longer_than_the_context_are_refused_up_front(
    server: Server, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc = profile_cmd("--url", server.v1, "--isl", "64,1000000", "--out", str(tmp_path / "p"))
    err = capsys.readouterr().err
    assert rc == 2 and "exceed the server's context" in err, err


# -- the rules, on values made by hand -------------------------------------------------


def test_lists_are_sorted_and_each_once() -> None:
    assert parse_list("--isl", " 512,128, 512") == [128, 512]
    assert decode_contexts([4096, 128, 512, 1024, 2048]) == [128, 1024, 4096]
    assert decode_contexts([64]) == [64]


def record(start: float, ttft: float, gaps: list[float]) -> dict[str, Any]:
    return {"start_s": start, "ttft_s": ttft, "itl_s": gaps, "error": None}


def test_only_gaps_while_every_stream_decodes_count() -> None:
    # A decodes from 1.0; B waits for its prefill until 3.0, and A's gaps until
    # then are slow (1.0: the prefill shares its steps) and must not count.
    # Both decode from 3.0 to 5.0 at 0.5; A ends at 5.0, then B alone at 0.1.
    a = record(0.0, 1.0, [1.0, 1.0, 0.5, 0.5, 0.5, 0.5])
    b = record(0.5, 2.5, [0.5, 0.5, 0.5, 0.5, 0.1, 0.1])
    assert steady_itls([a, b], 2) == [0.5, 0.5]
    # alone, each stream's every gap is steady
    assert steady_itls([b], 1) == [pytest.approx(2.2 / 6)]
    # two streams never decoding at once: nothing steady
    assert steady_itls([record(0, 1, [1.0]), record(5, 1, [1.0])], 2) == []
