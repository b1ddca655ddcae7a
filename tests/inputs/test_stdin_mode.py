"""`rotor run in=stdin` through a pipe, as a shell runs it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

TIMEOUT_S = 30  # a deadline for a hung process, not an expected duration


def rotor_stdin(data: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "ROTOR_ECHO_DELAY_MS": "1"}
    env.pop("ROTOR_IN", None)
    return subprocess.run(
        [sys.executable, "-m", "rotor.cli", "run", "in=stdin", *args],
        input=data,
        capture_output=True,
        env=env,
        timeout=TIMEOUT_S,
    )


def test_echo_hello_prints_hello() -> None:
    rotor = Path(sys.executable).parent / "rotor"
    env = {**os.environ, "ROTOR_ECHO_DELAY_MS": "1"}
    done = subprocess.run(
        f"echo hello | '{rotor}' run in=stdin",
        shell=True,
        capture_output=True,
        env=env,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"hello\n"


def test_the_answer_streams_and_ctrl_c_stops_it_with_130() -> None:
    env = {**os.environ, "ROTOR_ECHO_DELAY_MS": "50"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rotor.cli", "run", "in=stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"x" * 200)  # 200 tokens x 50 ms = 10 s if left to run
        proc.stdin.close()
        ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT_S)
        assert ready, "no output"
        first = os.read(proc.stdout.fileno(), 1)
        assert first == b"x"
        assert proc.poll() is None  # output came while the answer was still running
        proc.send_signal(signal.SIGINT)
        assert proc.wait(TIMEOUT_S) == 130
        rest = proc.stdout.read()
        # Cut off: not all 200 tokens were written (the cancel stopped the answer).
        assert rest.endswith(b"\n") and len(first + rest) < 200
        assert b"Traceback" not in (proc.stderr.read() if proc.stderr else b"")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_whole_of_stdin_is_one_message() -> None:
    done = rotor_stdin("first line\nsecond line, ünïcode\n".encode())
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "first line\nsecond line, ünïcode\n"


def test_max_tokens_limits_the_answer() -> None:
    done = rotor_stdin(b"hello world\n", "--max-tokens", "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"hello\n"


def test_reasoning_goes_to_stderr_and_the_answer_to_stdout() -> None:
    done = rotor_stdin(b"<think>pondering</think>the answer\n", "--reasoning-parser", "qwen3")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"the answer\n"
    assert b"pondering" in done.stderr
    assert b"\x1b[" not in done.stderr  # a pipe gets no escapes


def test_a_request_error_goes_to_stderr_with_status_1() -> None:
    done = rotor_stdin(b"a message longer than the context\n", "--max-model-len", "8")
    assert done.returncode == 1
    assert done.stdout == b""
    assert b"context" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_invalid_limit_is_an_error_with_status_1() -> None:
    done = rotor_stdin(b"hello\n", "--max-tokens", "0")
    assert done.returncode == 1
    assert b"max_tokens" in done.stderr


def test_empty_stdin_is_an_error() -> None:
    done = rotor_stdin(b"")
    assert done.returncode == 1
    assert b"empty" in done.stderr
