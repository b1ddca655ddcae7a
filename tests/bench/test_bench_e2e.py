"""`rotor bench` end to end: the command as a subprocess against a real
`rotor run out=mocker --speedup-ratio 0`, checked against what the server
itself counted (its /metrics), and its report checked for being self-contained."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from support.server import Server, rotor_server
from support.wait import wait_for

pytestmark = pytest.mark.e2e

SMALL = ["--input-len", "20", "--output-len", "8", "--seed", "1", "--no-progress"]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
        yield srv


def bench(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "rotor.cli", "bench", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def counters(srv: Server) -> dict[str, float]:
    """The server's own accounting, once no request is in flight any more."""
    wait_for("no request in flight", lambda: srv.metric("rotor_requests_in_flight") == 0)
    return {
        "ok": srv.metric("rotor_requests_total", 'status="200"'),
        "prompt": srv.metric("rotor_prompt_tokens_total"),
        "output": srv.metric("rotor_completion_tokens_total"),
    }


def run_bench(srv: Server, out: Path, *argv: str) -> tuple[dict[str, Any], dict[str, float]]:
    """Run the command; its results and what the server counted meanwhile."""
    before = counters(srv)
    bench("--url", srv.v1, "--output-dir", str(out), *argv)
    after = counters(srv)
    doc = orjson.loads((out / "results.json").read_bytes())
    return doc, {k: after[k] - before[k] for k in before}


def check_doc(doc: dict[str, Any], counted: dict[str, float], per_level: int) -> None:
    """Schema, counts, timings; token totals equal to the server's (the probe,
    the tokens-per-word calibration and the warm-up included)."""
    assert doc["schema"] == "rotor.bench/1"
    keys = ("label", "created", "rotor_version", "config", "probe", "calibration", "warmup")
    for key in (*keys, "levels"):
        assert key in doc, key
    records = []
    for level in doc["levels"]:
        s = level["summary"]
        reqs = level["requests"]
        assert s["requests"] == s["completed"] == len(reqs) == per_level
        assert s["failed"] == 0 and s["errors"] == {} and s["without_usage"] == 0
        assert [r["index"] for r in reqs] == list(range(per_level))
        for r in reqs:
            assert r["error"] is None, r["error"]
            assert 0 < r["ttft_s"] <= r["e2e_s"]
            assert all(g >= 0 for g in r["itl_s"])
            assert r["output_tokens"] >= 1 and r["prompt_tokens"] >= 1
        assert s["output_tokens"] == sum(r["output_tokens"] for r in reqs)
        assert s["prompt_tokens"] == sum(r["prompt_tokens"] for r in reqs)
        assert s["ttft_ms"]["p50"] <= s["ttft_ms"]["p99"] <= s["ttft_ms"]["max"]
        assert s["request_throughput"] > 0 and s["output_throughput"] > 0
        records += reqs
    probe, warm, cal = doc["probe"], doc["warmup"], doc["calibration"]
    assert warm["failed"] == 0 and cal["failed"] == 0
    assert counted["ok"] == len(records) + 1 + warm["requests"] + cal["requests"]
    for key in ("output", "prompt"):
        field = f"{key}_tokens"
        ours = sum(r[field] for r in records) + probe[field] + warm[field] + cal[field]
        assert counted[key] == ours, key


@pytest.mark.parametrize("endpoint", ["chat", "completions", "messages", "responses"])
def test_closed_loop_each_endpoint(server: Server, tmp_path: Path, endpoint: str) -> None:
    doc, counted = run_bench(
        server,
        tmp_path,
        "--endpoint",
        endpoint,
        "--concurrency",
        "1",
        "3",
        "--num-requests",
        "6",
        "--warmup",
        "2",
        *SMALL,
    )
    check_doc(doc, counted, per_level=6)
    assert doc["warmup"]["requests"] == 2
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 3]
    assert doc["config"]["endpoint"] == endpoint and doc["config"]["model"] == "mock-model"
    # rotor takes ignore_eos on chat and completions only; there every answer is max_tokens long
    assert doc["config"]["ignore_eos"] is (endpoint in ("chat", "completions"))
    if doc["config"]["ignore_eos"]:
        assert all(r["output_tokens"] == 8 for lv in doc["levels"] for r in lv["requests"])


def test_open_loop_with_shared_prefix_and_slo(server: Server, tmp_path: Path) -> None:
    doc, counted = run_bench(
        server,
        tmp_path,
        "--request-rate",
        "200",
        "inf",
        "--burstiness",
        "0.5",
        "--num-requests",
        "12",
        "--warmup",
        "0",
        "--shared-prefix",
        "2x60",
        "--input-len",
        "70",
        "--output-len",
        "4",
        "--slo",
        "ttft=10s,tpot=10s",
        "--server-pid",
        str(server.process.pid),
        "--no-progress",
    )
    check_doc(doc, counted, per_level=12)
    assert [lv["request_rate"] for lv in doc["levels"]] == [200, "inf"]
    for lv in doc["levels"]:
        s = lv["summary"]
        assert s["goodput"]["requests"] == 12  # objectives no request can miss
        assert s["cached_tokens"] > 0  # two prefixes, twelve prompts: the server reused them
        assert s["cache_hit_ratio"] == pytest.approx(s["cached_tokens"] / s["prompt_tokens"])
        assert s["server_cpu"]["seconds"] >= 0 and s["server_cpu"]["us_per_output_token"] >= 0


def test_multi_turn_tools_and_a_dataset(server: Server, tmp_path: Path) -> None:
    doc, counted = run_bench(
        server,
        tmp_path / "turns",
        "--concurrency",
        "2",
        "--turns",
        "3",
        "--tools",
        "2",
        "--num-requests",
        "6",
        "--warmup",
        "0",
        *SMALL,
    )
    check_doc(doc, counted, per_level=6)
    reqs = doc["levels"][0]["requests"]
    by_conv: dict[int, list[dict[str, Any]]] = {}
    for r in reqs:
        by_conv.setdefault(r["conversation"], []).append(r)
    for turns in by_conv.values():
        assert [r["turn"] for r in turns] == list(range(len(turns)))
        prompts = [r["prompt_tokens"] for r in turns]
        assert prompts == sorted(prompts) and len(set(prompts)) == len(prompts)  # it grows

    data = tmp_path / "reqs.jsonl"
    data.write_text(
        '{"prompt": "hello there"}\n{"messages": [{"role": "user", "content": "hi"}]}\n'
    )
    doc, counted = run_bench(
        server,
        tmp_path / "data",
        "--dataset",
        str(data),
        "--endpoint",
        "messages",
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--warmup",
        "0",
        "--output-len",
        "3",
    )
    check_doc(doc, counted, per_level=4)


def test_report_is_self_contained_and_compare_works(server: Server, tmp_path: Path) -> None:
    common = ["--num-requests", "5", "--warmup", "0", *SMALL]
    bench(
        "--url", server.v1, "--concurrency", "1", "2", "--output-dir", str(tmp_path / "a"), *common
    )
    bench(
        "--url", server.v1, "--concurrency", "2", "4", "--output-dir", str(tmp_path / "b"), *common
    )
    for name in ("a", "b"):
        page = (tmp_path / name / "report.html").read_text()
        assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
        assert "<script src" not in page and "<link" not in page
        for title in (
            "TTFT percentiles",
            "Output tokens/s",
            "TTFT distribution",
            "Inter-token latency distribution",
        ):
            assert f"<title>{title}" in page, title
        assert page.count("<svg") == 8
        assert page.count("<circle") > 0 and page.count("<polygon") == 4  # 2 levels × 2 hists

    out = tmp_path / "cmp"
    proc = bench(
        "--compare",
        str(tmp_path / "a" / "results.json"),
        str(tmp_path / "b" / "results.json"),
        "--output-dir",
        str(out),
    )
    assert "a vs b" in proc.stdout
    page = (out / "report.html").read_text()
    assert "rotor bench: a vs b" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    # levels 1, 2, 4 across both runs: one TTFT and one ITL histogram each
    assert page.count("<title>TTFT at") == 3 and page.count("<title>ITL at") == 3
    assert "a p99" in page and "b p99" in page


def test_clear_errors(server: Server, tmp_path: Path) -> None:
    bad = bench("--url", server.v1, "--concurrency", "0", check=False)
    assert bad.returncode == 2 and "--concurrency must be positive" in bad.stdout
    model = bench("--url", server.v1, "--model", "nope", "--output-dir", str(tmp_path), check=False)
    assert model.returncode == 2 and "refused a probe request (http_404)" in model.stdout
    gone = bench("--url", "http://127.0.0.1:9/v1", "--model", "m", check=False)
    assert gone.returncode == 2 and "cannot connect" in gone.stdout
    notjson = tmp_path / "x.json"
    notjson.write_text("{}")
    cmp = bench("--compare", str(notjson), str(notjson), check=False)
    assert cmp.returncode == 2 and "not a rotor bench results file" in cmp.stdout


def trace_row(ts: int, n_in: int, ids: list[int], n_out: int) -> bytes:
    row = {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids}
    return orjson.dumps(row) + b"\n"


def test_trace_replay_keeps_to_its_schedule_and_shares_prefixes(
    server: Server, tmp_path: Path
) -> None:
    """A tiny Mooncake trace (64-token blocks), one request at a time so that
    each one finds the earlier ones' blocks in the mocker's prefix cache."""
    rows = [
        (1000, 150, [1, 2, 3], 5),
        (1100, 150, [1, 2, 4], 3),  # two blocks in common with the first
        (1300, 40, [6], 4),
        (1200, 100, [1, 5], 6),  # out of order in the file: sent third
        (1500, 250, [1, 2, 3, 7], 2),  # the first's whole prompt, then more
    ]
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(b"".join(trace_row(*r) for r in rows))
    doc, counted = run_bench(
        server,
        tmp_path / "out",
        "--trace",
        str(trace),
        "--trace-block-size",
        "64",
        "--trace-speedup",
        "2",
        "5",
        "--max-concurrency",
        "1",
        "--warmup",
        "1",
        "--slo",
        "ttft=10s,itl=10s",
        "--no-progress",
    )
    check_doc(doc, counted, per_level=5)
    assert doc["calibration"]["requests"] == 2
    tpw = doc["config"]["workload"]["tokens_per_word"]
    assert 3 < tpw < 7  # the test model's small BPE: ~5 tokens a word, measured from usage
    assert doc["config"]["mode"] == "trace" and doc["config"]["trace"] == str(trace)
    in_order = sorted(rows)
    for level, speedup in zip(doc["levels"], (2, 5), strict=True):
        assert (level["mode"], level["trace_speedup"]) == ("trace", speedup)
        reqs, s = level["requests"], level["summary"]
        want = [(ts - 1000) / 1000 / speedup for ts, *_ in in_order]
        assert [r["scheduled_s"] for r in reqs] == pytest.approx(want)
        lag = s["schedule_lag_ms"]
        assert lag["count"] == 5 and lag["p50"] <= lag["p99"] <= lag["max"]
        worst = max(r["start_s"] - r["scheduled_s"] for r in reqs)
        assert lag["max"] == pytest.approx(1e3 * worst)
        for r, (_, n_in, _, n_out) in zip(reqs, in_order, strict=True):
            assert r["output_tokens"] == r["max_tokens"] == n_out  # ignore_eos: all of them
            assert abs(r["prompt_tokens"] - n_in) <= 0.1 * n_in + 20  # + the chat template's
        assert reqs[0]["cached_tokens"] == 0  # every level its own text
        assert reqs[1]["cached_tokens"] >= 64  # [1, 2] of the first
        assert reqs[4]["cached_tokens"] >= 128  # [1, 2, 3] of the first
        g = s["goodput"]
        assert g["requests"] == 5 and g["output_tokens"] == sum(n for *_, n in rows)


def test_long_short_mix_with_goodput(server: Server, tmp_path: Path) -> None:
    doc, counted = run_bench(
        server,
        tmp_path,
        "--mix",
        "long=300:400@0.5,short=10:30",
        "--tokens-per-word",
        "4.8",
        "--request-rate",
        "50",
        "--num-requests",
        "16",
        "--warmup",
        "0",
        "--output-len",
        "6",
        "--slo",
        "ttft=10s,itl=10s",
        "--no-progress",
    )
    check_doc(doc, counted, per_level=16)
    assert doc["calibration"]["requests"] == 0  # given, not measured
    (level,) = doc["levels"]
    s = level["summary"]
    assert set(s["classes"]) == {"long", "short"}
    assert sum(c["requests"] for c in s["classes"].values()) == 16
    for r in level["requests"]:
        lo, hi = (300, 400) if r["class"] == "long" else (10, 30)
        assert 0.85 * lo <= r["prompt_tokens"] <= 1.15 * hi + 20
    assert s["goodput"]["requests"] == 16 and s["schedule_lag_ms"]["count"] == 16
