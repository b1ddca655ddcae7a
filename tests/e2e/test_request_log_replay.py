"""`rotor bench --trace LOG --trace-format rotor` for real: the request log a
`rotor run out=mocker --request-log-hashes` wrote, replayed against a fresh
one. Every request that got a response is sent again, at its arrival's
offset, with about its prompt tokens (the server's tokens per word, measured
as for Mooncake traces) and exactly its answer tokens (max_tokens and
ignore_eos); requests that shared a system prompt share their prompts'
leading text again, so the fresh mocker's prefix cache finds it."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from support.server import Server, rotor_server
from support.wait import wait_for

MODEL = "mock-model"
SYSTEMS = {
    "rivers": "Rivers are your subject. " + " ".join(f"river-{i}." for i in range(90)),
    "stars": "Stars are what you know. " + " ".join(f"star-{i}." for i in range(70)),
}
ASKED = [  # (system prompt or None, question, answer tokens)
    ("rivers", "Which is longer, the Nile or the Amazon?", 7),
    ("stars", "How far is Sirius?", 5),
    ("rivers", "Is the Rhine navigable?", 9),
    (None, "A question of its own, with no system prompt at all.", 4),
    ("stars", "What colour is Betelgeuse?", 6),
    ("rivers", "Where does the Danube rise?", 3),
]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The log of ASKED (and one refused request), and its records in order."""
    path = tmp_path_factory.mktemp("replay") / "requests.jsonl"
    with rotor_server(
        "out=mocker", "--speedup-ratio", "0", "--request-log", str(path), "--request-log-hashes"
    ) as srv:
        client = srv.openai()
        ids = []
        for system, question, n_out in ASKED:
            messages = [{"role": "user", "content": question}]
            if system is not None:
                messages.insert(0, {"role": "system", "content": SYSTEMS[system]})
            rid = f"replay-{uuid.uuid4().hex}"
            client.chat.completions.create(
                model=MODEL,
                messages=messages,
                max_tokens=n_out,
                extra_body={"ignore_eos": True},
                extra_headers={"x-request-id": rid},
            )
            ids.append(rid)
        with pytest.raises(openai.NotFoundError):  # logged, and not replayed
            client.chat.completions.create(
                model="nope", messages=[{"role": "user", "content": "x"}]
            )

        def all_written() -> bool:
            return path.exists() and len(path.read_bytes().splitlines()) == len(ASKED) + 1

        wait_for("every record", all_written, 30)
    by_id = {r["request_id"]: r for r in map(orjson.loads, path.read_bytes().splitlines())}
    return path, [by_id[rid] for rid in ids]


@pytest.fixture(scope="module")
def fresh() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
        yield srv


def test_replay_sends_the_logged_requests_with_their_prefixes(
    recorded: tuple[Path, list[dict[str, Any]]], fresh: Server, tmp_path: Path
) -> None:
    path, records = recorded
    assert all(len(r["block_hashes"]) == r["prompt_tokens"] // 16 for r in records)
    later = [r for r in records if r["cached_tokens"] > 0]
    assert len(later) == 3  # the mocker cached each shared system prompt once it was seen
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable, "-m", "rotor.cli", "bench", "--url", fresh.v1,
            "--trace", str(path), "--trace-format", "rotor", "--trace-speedup", "4",
            "--max-concurrency", "1", "--warmup", "0", "--no-progress",
            "--output-dir", str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "after the schedule" in proc.stdout  # the lag line under the table
    doc = orjson.loads((out / "results.json").read_bytes())
    assert doc["config"]["trace_format"] == "rotor"
    (level,) = doc["levels"]
    reqs, summary = level["requests"], level["summary"]
    assert summary["completed"] == len(reqs) == len(ASKED)  # the refused one is not replayed
    t0 = records[0]["arrival"]
    want = [(r["arrival"] - t0) / 4 for r in records]
    assert [r["scheduled_s"] for r in reqs] == pytest.approx(want, abs=1e-3)
    lag = summary["schedule_lag_ms"]
    assert lag["count"] == len(ASKED) and lag["p50"] <= lag["max"]
    for sent, logged in zip(reqs, records, strict=True):
        assert sent["error"] is None, sent["error"]
        assert sent["output_tokens"] == sent["max_tokens"] == logged["completion_tokens"]
        n = logged["prompt_tokens"]
        assert abs(sent["prompt_tokens"] - n) <= 0.1 * n + 20, (sent["prompt_tokens"], n)
    for sent, logged in zip(reqs, records, strict=True):
        if logged["cached_tokens"] > 0:  # a shared system prompt, seen before
            assert sent["cached_tokens"] >= 0.5 * logged["cached_tokens"], (sent, logged)
        else:
            assert sent["cached_tokens"] < 16, sent  # at most the chat template's start
