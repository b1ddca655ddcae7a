"""`rotor run in=batch:FILE`: one output line per input line, in order, errors in place."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rotor.inputs.batch import output_path, percentile

from support.wait import wait_for

TIMEOUT_S = 60  # a deadline for a hung process, not an expected duration


def rotor_batch(file: Path, *args: str, delay_ms: str = "1") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROTOR_ECHO_DELAY_MS": delay_ms}
    env.pop("ROTOR_OUTPUT", None)
    return subprocess.run(
        [sys.executable, "-m", "rotor.cli", "run", f"in=batch:{file}", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
    )


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines),
        encoding="utf-8",
    )
    return path


def read_out(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_bad_lines_become_errors_in_place_and_the_run_goes_on(tmp_path: Path) -> None:
    file = write_lines(
        tmp_path / "in.jsonl",
        [
            {"text": "hello"},
            "this is not JSON",
            {"text": "too hot", "temperature": 9},
            [1, 2, 3],
            {"text": "world"},
        ],
    )
    done = rotor_batch(file)
    assert done.returncode == 0, done.stderr
    out = read_out(tmp_path / "in.out.jsonl")
    assert [r["index"] for r in out] == [0, 1, 2, 3, 4]
    assert set(out[1]) == {"index", "error"} and "JSON" in out[1]["error"]
    assert set(out[2]) == {"index", "error"} and "temperature" in out[2]["error"]
    assert set(out[3]) == {"index", "error"} and "object" in out[3]["error"]
    for record, text in ((out[0], "hello"), (out[4], "world")):
        assert record["text"] == text
        assert record["finish_reason"] == "stop"
        assert record["prompt_tokens"] == len(text)  # the echo model counts characters
        assert record["completion_tokens"] == len(text)
        assert record["latency_s"] > 0
    summary = done.stderr
    assert "5 requests" in summary and "3 errors" in summary
    assert "tokens/s" in summary and "p50" in summary and "p99" in summary
    assert "━" not in summary and "%" not in summary  # no progress bar on a pipe


def test_messages_lines_and_max_tokens(tmp_path: Path) -> None:
    file = write_lines(
        tmp_path / "chat.jsonl",
        [
            {
                "messages": [
                    {"role": "system", "content": "be terse"},
                    {"role": "user", "content": "earlier"},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": "the last user message"},
                ],
                "stream": True,  # forced off: the output is one line anyway
                "stream_options": {"include_usage": True},
            },
            {"messages": [{"role": "user", "content": "own limit wins"}], "max_tokens": 3},
            {"text": "limited by the flag"},
        ],
    )
    done = rotor_batch(file, "--max-tokens", "7")
    assert done.returncode == 0, done.stderr
    out = read_out(tmp_path / "chat.out.jsonl")
    assert out[0]["text"] == "the las" and out[0]["finish_reason"] == "length"
    assert out[1]["text"] == "own" and out[1]["completion_tokens"] == 3
    assert out[2]["text"] == "limited"


def test_output_flag_and_a_file_without_jsonl_suffix(tmp_path: Path) -> None:
    file = write_lines(tmp_path / "prompts.txt", [{"text": "one"}, {"text": "two"}])
    target = tmp_path / "answers" / "x.jsonl"
    target.parent.mkdir()
    done = rotor_batch(file, "--output", str(target))
    assert done.returncode == 0, done.stderr
    assert [r["text"] for r in read_out(target)] == ["one", "two"]
    assert not (tmp_path / "prompts.txt.out.jsonl").exists()
    done = rotor_batch(file)
    assert done.returncode == 0, done.stderr
    assert [r["text"] for r in read_out(tmp_path / "prompts.txt.out.jsonl")] == ["one", "two"]


def test_requests_run_concurrently_and_are_written_in_input_order(tmp_path: Path) -> None:
    # Long answers first, so they finish last if requests overlap.
    texts = [("long " * 8).strip() if i < 8 else f"s{i}" for i in range(32)]
    file = write_lines(tmp_path / "many.jsonl", [{"text": t} for t in texts])
    done = rotor_batch(file, delay_ms="20")
    assert done.returncode == 0, done.stderr
    out = read_out(tmp_path / "many.out.jsonl")
    assert [r["text"] for r in out] == texts
    # The run's own time, from its summary (startup not counted).
    took = re.search(r"32 requests, 0 errors in ([0-9.]+) s", done.stderr)
    assert took, done.stderr
    # One after another, the latencies would add up to less than the run took;
    # twice that only if requests overlapped (and the summary's rounding is moot).
    assert sum(r["latency_s"] for r in out) > 2 * float(took.group(1))


def test_an_unreadable_file_exits_2(tmp_path: Path) -> None:
    done = rotor_batch(tmp_path / "missing.jsonl")
    assert done.returncode == 2
    assert "missing.jsonl" in done.stderr
    assert not (tmp_path / "missing.out.jsonl").exists()


def test_blank_lines_are_skipped_and_index_is_the_line_number(tmp_path: Path) -> None:
    file = tmp_path / "gaps.jsonl"
    file.write_text('{"text": "a"}\n\n{"text": "b"}\n', encoding="utf-8")
    done = rotor_batch(file)
    assert done.returncode == 0, done.stderr
    assert [(r["index"], r["text"]) for r in read_out(tmp_path / "gaps.out.jsonl")] == [
        (0, "a"),
        (2, "b"),
    ]


def test_whitespace_only_lines_are_blank_and_crlf_ends_a_line(tmp_path: Path) -> None:
    """The README's rule exactly: a line (split at "\\n", a "\\r" before it
    dropped) that is empty or whitespace only — Python's str.strip, so tabs and
    U+00A0 too — gets no request and no output line."""
    file = tmp_path / "ws.jsonl"
    text = '{"text": "a"}\r\n  \r\n\t\n\u00a0\n{"text": "b"}\n\n'
    file.write_text(text, encoding="utf-8", newline="")
    done = rotor_batch(file)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "ws.out.jsonl"
    assert [(r["index"], r["text"]) for r in read_out(out)] == [(0, "a"), (4, "b")]
    only_blank = tmp_path / "blank.jsonl"
    only_blank.write_text("\n \n\n", encoding="utf-8")
    done = rotor_batch(only_blank)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "blank.out.jsonl").read_bytes() == b""


@pytest.mark.parametrize(
    ("path", "output", "expected"),
    [
        ("x.jsonl", None, "x.out.jsonl"),
        ("dir/x.jsonl", None, "dir/x.out.jsonl"),
        ("x.txt", None, "x.txt.out.jsonl"),
        ("x", None, "x.out.jsonl"),
        ("x.jsonl", "y.jsonl", "y.jsonl"),
    ],
)
def test_output_path(path: str, output: str | None, expected: str) -> None:
    assert output_path(path, output) == Path(expected)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 90), percentile(values, 99)) == (50, 90, 99)
    assert percentile([3.0], 99) == 3.0


def test_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    file = write_lines(tmp_path / "tty.jsonl", [{"text": f"line {i}"} for i in range(20)])
    master, slave = os.openpty()
    env = {**os.environ, "ROTOR_ECHO_DELAY_MS": "1", "TERM": "xterm-256color"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rotor.cli", "run", f"in=batch:{file}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    seen: list[bytes] = []

    def ended() -> bool:
        """Read what the terminal got; True once the child closed it or exited."""
        ready, _, _ = select.select([master], [], [], 0.1)
        if not ready:
            return proc.poll() is not None
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return True
        seen.append(data)
        return not data

    try:
        wait_for("the batch run to end", ended, TIMEOUT_S)
        assert proc.wait(TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = b"".join(seen).decode(errors="replace")
    assert "━" in text and "20/20" in text
    assert "20 requests, 0 errors" in text


def test_ctrl_c_keeps_the_lines_written_so_far_and_exits_130(tmp_path: Path) -> None:
    # One short line, then lines that would take 10 s each at 50 ms a token.
    texts = ["quick"] + ["y" * 200] * 40
    file = write_lines(tmp_path / "stop.jsonl", [{"text": t} for t in texts])
    out = tmp_path / "stop.out.jsonl"
    env = {**os.environ, "ROTOR_ECHO_DELAY_MS": "50"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rotor.cli", "run", f"in=batch:{file}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:

        def a_line_written() -> bool:
            if out.exists() and out.read_text().endswith("\n"):
                return True
            assert proc.poll() is None, "the run ended before any line was written"
            return False

        wait_for("a line written", a_line_written, TIMEOUT_S)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(TIMEOUT_S) == 130
        stderr = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    records = read_out(out)
    assert records[0]["text"] == "quick"
    assert len(records) < len(texts)
    assert "interrupted" in stderr and "Traceback" not in stderr
