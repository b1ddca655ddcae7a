"""The `rotor` command line: help when called alone, a version, defaults in
--help, and bad values refused in one line that names the flag."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rotor import __version__
from rotor.cli import build_parser, main
from rotor.config import ModelConfig
from rotor.serve.build import StartupError, served_names


def rotor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "rotor.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_rotor_alone_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    for command in ("run", "nats", "frontend", "worker", "bench"):
        assert command in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"rotor {__version__}"


def test_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 8000) [ROTOR_PORT]" in out
    assert "(default: 1.0) [ROTOR_SPEEDUP_RATIO]" in out


@pytest.mark.parametrize(
    ("args", "flag", "why"),
    [
        (["run", "--port", "99999"], "--port", "at most 65535"),
        (["run", "--port", "abc"], "--port", "expected an integer"),
        (["run", "out=mocker", "--speedup-ratio", "-1"], "--speedup-ratio", "at least 0"),
        (["run", "out=mocker", "--block-size", "0"], "--block-size", "at least 1"),
        (["worker", "--migration-limit", "1"], "--migration-limit", "unrecognized"),
        (["frontend", "--migration-limit", "-1"], "--migration-limit", "at least 0"),
        (["run", "--log-format", "xml"], "--log-format", "invalid choice: 'xml'"),
        (["frontend", "--log-format", "yaml"], "--log-format", "invalid choice: 'yaml'"),
        (["worker", "--log-format", ""], "--log-format", "invalid choice: ''"),
        (["frontend", "--router-host-hit-weight", "1.5"], "--router-host-hit-weight", "at most 1"),
        (["frontend", "--router-predicted-ttl", "-1"], "--router-predicted-ttl", "at least 0"),
        (["worker", "--kv-events-delay-ms", "-5"], "--kv-events-delay-ms", "at least 0"),
        (
            ["frontend", "--router-disk-hit-weight", "0.9"],
            "--router-disk-hit-weight",
            "(0.9) must be at most --router-host-hit-weight (0.75)",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag(args: list[str], flag: str, why: str) -> None:
    done = rotor(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert why in lines[0] and flag in lines[0]
    assert "Traceback" not in done.stderr


def test_a_bad_environment_value_names_the_variable() -> None:
    done = rotor("run", env={"ROTOR_PORT": "70000"})
    assert done.returncode != 0
    assert done.stderr.strip() == "rotor: ROTOR_PORT: must be at most 65535, got 70000"


def test_a_bad_log_format_in_the_environment_names_the_variable() -> None:
    done = rotor("run", env={"ROTOR_LOG_FORMAT": "xml"})
    assert done.returncode != 0
    assert done.stderr.strip() == "rotor: ROTOR_LOG_FORMAT='xml' is not one of text, json"


def test_serving_is_announced_once_bound_with_the_real_port() -> None:
    import os
    import re
    import socket

    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "rotor.cli", "run", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ROTOR_ECHO_DELAY_MS": "0"},
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.fullmatch(r"rotor: serving 'echo' on (http://127\.0\.0\.1:(\d+)/v1)\n", line)
        assert match, line
        assert match.group(2) != "0"
        assert httpx.get(match.group(1).removesuffix("/v1") + "/live", timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(15)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = rotor("run", "--port", port)
    assert done.returncode != 0
    assert "serving" not in done.stderr  # never announced: the port was not ours
    assert "address already in use" in done.stderr


def test_served_model_names_come_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = build_parser().parse_args(["run", "--served-model-name", "a", "b"])
    assert args.served_model_name == ["a", "b"]
    monkeypatch.setenv("ROTOR_SERVED_MODEL_NAME", "c  d")
    assert build_parser().parse_args(["worker"]).served_model_name == ["c", "d"]
    assert build_parser().parse_args(["run"]).model_name is None


def test_served_names_pick_the_canonical_name_and_refuse_two() -> None:
    assert served_names(ModelConfig(model_name="m")) == ("m", [])
    assert served_names(ModelConfig(served_model_names=["a", "b", "a"])) == ("a", ["b"])
    assert served_names(ModelConfig(model_name="a", served_model_names=["a", "b"])) == ("a", ["b"])
    with pytest.raises(StartupError, match="give one"):
        served_names(ModelConfig(model_name="m", served_model_names=["a"]))
    with pytest.raises(StartupError, match="a name is empty"):
        served_names(ModelConfig(served_model_names=["a", " "]))
