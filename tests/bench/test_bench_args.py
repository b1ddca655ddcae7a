"""Flags → BenchConfig: good values parse, bad ones are a message naming the flag."""

from __future__ import annotations

import argparse

import pytest

from rotor.bench.args import add_arguments, config_from_args, parse_shared_prefix, parse_slo


def config(*argv: str):
    p = argparse.ArgumentParser()
    add_arguments(p)
    return config_from_args(p.parse_args(list(argv)))


def test_slo_units() -> None:
    assert parse_slo("ttft=200ms,tpot=50ms") == {"ttft": 0.2, "tpot": 0.05}
    assert parse_slo("e2e=1.5s, ttft=800us") == pytest.approx({"e2e": 1.5, "ttft": 0.0008})
    assert parse_slo("ttft=20") == {"ttft": 0.02}  # bare numbers are ms
    assert parse_slo("ttft=2s,itl=50ms") == {"ttft": 2.0, "itl": 0.05}
    for bad in ("ttft", "latency=2s", "ttft=fast", ""):
        with pytest.raises(ValueError, match="--slo"):
            parse_slo(bad)


def test_shared_prefix() -> None:
    assert parse_shared_prefix("4x256") == (4, 256)
    with pytest.raises(ValueError, match="NxL"):
        parse_shared_prefix("4")


def test_modes_and_defaults() -> None:
    c = config("--concurrency", "1", "8")
    assert (c.mode, c.levels) == ("closed", [1.0, 8.0])
    assert c.requests_for(1) == 100 and c.requests_for(32) == 320
    o = config("--request-rate", "5", "inf", "--burstiness", "0.5")
    assert (o.mode, o.levels, o.burstiness) == ("open", [5.0, float("inf")], 0.5)
    assert o.requests_for(5) == 200
    assert config("--duration", "3").requests_for(8) is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "2", "--request-rate", "3"], "not both"),
        (["--concurrency", "0"], "--concurrency must be positive"),
        (["--request-rate", "-1"], "--request-rate must be positive"),
        (["--max-concurrency", "4"], "caps the open loop"),
        (["--endpoint", "completions", "--tools", "2"], "--tools needs"),
        (["--dataset", "/nonexistent.jsonl"], "no such file"),
        (["--output-len", "0"], "--output-len must be positive"),
        (["--request-rate", "inf", "--duration", "2"], "needs --num-requests"),
        (["--trace", "/nonexistent.jsonl"], "--trace /nonexistent.jsonl: no such file"),
        (["--trace-speedup", "2"], "--trace-speedup needs --trace"),
        (["--mix", "a=1:2", "--turns", "2"], "--mix makes one-turn prompts"),
        (["--mix", "a=1:2", "--shared-prefix", "2x3"], "--mix makes one-turn prompts"),
        (["--mix", "a=2:1"], "--mix"),
        (["--tokens-per-word", "0"], "--tokens-per-word must be positive"),
    ],
)
def test_bad_flags(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(*argv)


def test_trace_flags(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("")
    c = config("--trace", str(path), "--trace-speedup", "1", "4", "--trace-block-size", "64")
    assert (c.mode, c.levels, c.trace, c.trace_block_size) == ("trace", [1.0, 4.0], path, 64)
    assert c.trace_format == "mooncake" and c.requests_for(1) is None  # all of it
    assert config("--trace", str(path), "--num-requests", "5").requests_for(1) == 5
    assert config("--trace", str(path)).levels == [1.0]
    for extra, flag in (
        (["--concurrency", "2"], "--concurrency"),
        (["--request-rate", "2"], "--request-rate"),
        (["--mix", "a=1"], "--mix"),
        (["--turns", "2"], "--turns"),
        (["--trace-speedup", "0"], "--trace-speedup must be positive"),
        (["--trace-block-size", "0"], "--trace-block-size must be positive"),
    ):
        with pytest.raises(ValueError, match=flag):
            config("--trace", str(path), *extra)
    with pytest.raises(SystemExit):
        config("--trace", str(path), "--trace-format", "nope")


def test_mix_flag() -> None:
    c = config("--mix", "long=8000:16000@0.3,short=100:1000", "--tokens-per-word", "1.3")
    assert [m.name for m in c.workload.mix] == ["long", "short"] and c.tokens_per_word == 1.3
