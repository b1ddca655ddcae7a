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
    ],
)
def test_bad_flags(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(*argv)
