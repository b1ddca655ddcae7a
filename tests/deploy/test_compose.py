"""deploy/Dockerfile and deploy/compose.yaml, read without docker (no daemon,
no registry here): the compose file's services, each command parsed by
rotor's real argument parser with the environment the container gives it,
ports and healthchecks against those flags, the start order; the
Dockerfile's instructions per build target. The healthcheck commands
themselves then run against a real frontend, worker and nats-server, their
ports put in, and must fail where nothing listens."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from rotor.cli import build_parser, parse_io, split_passthrough
from rotor.engines.registry import engine_spec

from support.cluster import Frontend, Nats, Worker, nats_server, start_frontend, start_worker
from support.environ import rotor_env
from support.server import free_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"
LOOPBACK = ("127.0.0.1", "localhost", "::1")

# --- the Dockerfile ------------------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[Instruction]


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions: continuation lines joined, comments dropped."""
    out: list[Instruction] = []
    pending = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or (not line.strip() and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        keyword, _, args = whole.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def stages(text: str) -> list[Stage]:
    found: list[Stage] = []
    for ins in instructions(text):
        if ins.keyword == "FROM":
            words = ins.args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            found.append(Stage(name, words[0], []))
        else:
            assert found, f"{ins.keyword} before FROM"
            found[-1].instructions.append(ins)
    return found


@dataclass
class Image:
    """What a build target's image is configured with (inherited across stages)."""

    base: str = ""
    env: dict[str, str] = field(default_factory=dict)
    user: str = "root"
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    healthcheck: list[str] | None = None
    expose: set[int] = field(default_factory=set)
    runs: list[str] = field(default_factory=list)
    copies: list[list[str]] = field(default_factory=list)


def image(target: str | None = None) -> Image:
    """The image `docker build --target TARGET` makes (the last stage by default)."""
    all_stages = stages(DOCKERFILE.read_text())
    by_name = {s.name: s for s in all_stages if s.name}
    stage = by_name[target] if target else all_stages[-1]
    chain = [stage]
    while chain[-1].base in by_name:
        chain.append(by_name[chain[-1].base])
    img = Image(base=chain[-1].base)
    for s in reversed(chain):
        for ins in s.instructions:
            _apply(img, ins)
    return img


def _apply(img: Image, ins: Instruction) -> None:
    if ins.keyword == "ENV":
        for word in shlex.split(ins.args):
            key, _, value = word.partition("=")
            img.env[key] = value
    elif ins.keyword == "USER":
        img.user = ins.args
    elif ins.keyword == "ENTRYPOINT":
        img.entrypoint = json.loads(ins.args)
    elif ins.keyword == "CMD":
        img.cmd = json.loads(ins.args)
    elif ins.keyword == "HEALTHCHECK":
        _, _, command = ins.args.partition("CMD ")
        img.healthcheck = json.loads(command)
    elif ins.keyword == "EXPOSE":
        img.expose |= {int(p.split("/")[0]) for p in ins.args.split()}
    elif ins.keyword == "RUN":
        img.runs.append(ins.args)
    elif ins.keyword == "COPY":
        img.copies.append([w for w in ins.args.split() if not w.startswith("--")])


def defaults(command: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """What `rotor COMMAND` gets with no flags, under these variables alone."""
    with rotor_env(env or {}):
        return vars(build_parser().parse_args([command]))


def default_port(command: str) -> int:
    return defaults(command)["port"]


@pytest.mark.parametrize("target", [None, "vllm"], ids=["default", "vllm"])
def test_the_image_runs_rotor_as_a_user(target: str | None) -> None:
    img = image(target)
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", img.base), img.base
    assert img.entrypoint == ["rotor"]
    assert img.user not in ("root", "0", "0:0") and not img.user.startswith("0:")
    assert img.cmd and img.cmd[0] in ("run", "frontend", "worker", "nats")
    # one image for every role: the HTTP API's port and rotor nats's
    assert {default_port("frontend"), default_port("run"), default_port("nats")} <= img.expose
    for key, value in img.env.items():
        if key.startswith("ROTOR_"):  # a variable rotor reads: it changes some command's flags
            commands = ("run", "frontend", "worker")
            changed = [c for c in commands if defaults(c, {key: value}) != defaults(c)]
            assert changed, f"{key}={value} changes no rotor command's flags"


@pytest.mark.parametrize("target", [None, "vllm"], ids=["default", "vllm"])
def test_the_image_s_healthcheck_asks_live_on_the_api_port(target: str | None) -> None:
    check = image(target).healthcheck
    assert check is not None and check[:2] == ["python", "-c"]
    code = check[2]
    compile(code, "HEALTHCHECK", "exec")
    assert "urllib.request" in code and "/live" in code and "curl" not in code
    # the port --port reads from ROTOR_PORT, defaulting as rotor does, or a
    # worker's --system-port as ROTOR_SYSTEM_PORT gives it
    assert "ROTOR_PORT" in code and f"'{default_port('frontend')}'" in code
    assert "ROTOR_SYSTEM_PORT" in code
    assert defaults("worker", {"ROTOR_SYSTEM_PORT": "8081"})["system_port"] == 8081


def test_rotor_is_installed_from_the_checkout() -> None:
    default, gpu = image(), image("vllm")
    # the default image runs the planner too: its kubernetes connector's client comes with it
    assert any('pip install ".[kubernetes]"' in r for r in default.runs), default.runs
    assert re.search(r"^kubernetes = \[", (ROOT / "pyproject.toml").read_text(), re.M)
    assert any('pip install ".[vllm]"' in r for r in gpu.runs), gpu.runs
    assert re.search(r"^vllm = \[", (ROOT / "pyproject.toml").read_text(), re.M)
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split("\n")
    patterns = [p.strip() for p in ignore if p.strip() and not p.startswith("#")]
    assert patterns[0] == "*", "the context is the checkout: send only what the image needs"
    for copy in default.copies:
        for source in copy[:-1]:
            assert (ROOT / source).exists(), source
            assert f"!{source}" in patterns, f"{source} is left out of the build context"


# --- compose.yaml -----------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def parse_command(
    words: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> argparse.Namespace:
    """`rotor WORDS` through rotor's own parser, as `rotor.cli.main` reads it,
    with only the container's ROTOR_* variables set. A parse error fails."""
    for key in list(os.environ):
        if key.startswith("ROTOR_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    own, passthrough = (
        split_passthrough(words) if words[:1] in (["run"], ["worker"]) else (words, [])
    )
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            args = build_parser().parse_args(own)
        except SystemExit as e:
            pytest.fail(f"rotor {' '.join(words)}: exit {e.code}: {err.getvalue().strip()}")
    assert not passthrough, "no engine here takes words after --"
    if args.command == "run":
        parse_io(args.io)
    if args.command == "worker":
        outs = [w.partition("=")[2] for w in args.io if w.startswith("out=")]
        assert len(outs) == len(args.io) == 1, args.io
        engine_spec(outs[0])  # KeyError: no such engine
    return args


def container_env(service: dict[str, Any]) -> dict[str, str]:
    env = dict(image().env)
    declared = service.get("environment", {})
    if isinstance(declared, list):
        declared = dict(item.split("=", 1) for item in declared)
    return {**env, **{k: str(v) for k, v in declared.items()}}


def parsed_services(monkeypatch: pytest.MonkeyPatch) -> dict[str, argparse.Namespace]:
    return {
        name: parse_command([str(w) for w in s["command"]], container_env(s), monkeypatch)
        for name, s in services().items()
    }


def health_code(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"], test  # slim images have no curl
    compile(test[3], "healthcheck", "exec")
    return test[3]


def seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration)
    assert parts and "".join(a + b for a, b in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def test_the_services() -> None:
    found = services()
    assert set(found) == {"nats", "frontend", "worker-1", "worker-2"}
    for name, service in found.items():
        build = service["build"]
        assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
        assert service["image"] == found["nats"]["image"], "one image for every role"
        assert "healthcheck" in service, name


def test_every_command_parses_with_rotor_s_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parsed_services(monkeypatch)
    assert args["nats"].command == "nats"
    assert args["frontend"].command == "frontend"
    for name in ("worker-1", "worker-2"):
        assert args[name].command == "worker" and args[name].io == ["out=mocker"]
        assert args[name].system_port, f"{name}: no --system-port: no /health to check"


def test_published_ports_are_the_ones_rotor_binds(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parsed_services(monkeypatch)
    for name, service in services().items():
        for mapping in service.get("ports", []):
            container = int(str(mapping).rsplit(":", 1)[-1].split("/")[0])
            assert container == args[name].port, f"{name}: publishes {mapping}"
            assert args[name].host not in LOOPBACK, f"{name} binds {args[name].host}"
    assert services()["frontend"]["ports"], "the HTTP API is published"
    for name in ("worker-1", "worker-2"):  # scraped on the compose network, published nowhere
        assert "ports" not in services()[name], name
        assert args[name].system_host not in LOOPBACK, f"{name}: Prometheus cannot scrape it"


def test_healthchecks_ask_the_right_port(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parsed_services(monkeypatch)
    for name, service in services().items():
        code = health_code(service)
        check = service["healthcheck"]
        assert seconds(check["timeout"]) > float(re.findall(r"timeout=(\d+)", code)[0])
        assert seconds(check["interval"]) > 0 and check["retries"] >= 1
        url = re.search(r"http://127\.0\.0\.1:(\d+)(/\w+)", code)
        if args[name].command == "frontend":
            assert url and (int(url[1]), url[2]) == (args[name].port, "/live"), code
        elif args[name].command == "worker":  # a worker's HTTP is its --system-port
            assert url and (int(url[1]), url[2]) == (args[name].system_port, "/health"), code
        else:
            port = re.search(r"\('127\.0\.0\.1', (\d+)\)", code)
            assert port and int(port[1]) == args[name].port and "INFO" in code, code


def test_everything_starts_after_nats_is_healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parsed_services(monkeypatch)
    found = services()
    assert not found["nats"].get("depends_on")
    for name, service in found.items():
        if not hasattr(args[name], "nats"):
            continue
        url = re.fullmatch(r"nats://([\w-]+):(\d+)", args[name].nats)
        assert url, args[name].nats
        host, port = url[1], int(url[2])
        assert host in found and int(port) == args[host].port, f"{name}: {args[name].nats}"
        assert service["depends_on"][host]["condition"] == "service_healthy", name

    def visit(name: str, path: list[str]) -> None:
        assert name in found and name not in path, f"depends_on: {' -> '.join([*path, name])}"
        for dependency in found[name].get("depends_on", {}):
            visit(dependency, [*path, name])

    for name in found:
        visit(name, [])


def test_stopping_gives_rotor_its_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """docker stop's SIGKILL comes after stop_grace_period (default 10 s): it
    must outlast the drain rotor is told to allow."""
    args = parsed_services(monkeypatch)
    for name, service in services().items():
        grace = getattr(args[name], "grace_period", None) or getattr(
            args[name], "shutdown_grace", None
        )
        if grace:
            assert seconds(service.get("stop_grace_period", "10s")) > grace, name


# --- the healthchecks, run for real ------------------------------------------------------------------


@dataclass
class Running:
    nats: Nats
    frontend: Frontend
    worker: Worker


@pytest.fixture(scope="module")
def running() -> Iterator[Running]:
    with nats_server() as nats, contextlib.ExitStack() as stack:
        worker = start_worker(nats, "out=mocker", "--speedup-ratio", "0", system=True)
        stack.callback(worker.proc.stop)
        frontend = start_frontend(nats)
        stack.callback(frontend.proc.stop)
        yield Running(nats, frontend, worker)


def run_check(code: str, env: dict[str, str] | None = None) -> int:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ROTOR_")}
    done = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **(env or {})}, capture_output=True, timeout=30
    )
    return done.returncode


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _with_port(code: str, old: int, new: int) -> str:
    pattern = rf"(127\.0\.0\.1(?::|', )){old}\b"
    assert len(re.findall(pattern, code)) == 1, code
    return re.sub(pattern, rf"\g<1>{new}", code)


@pytest.mark.e2e
def test_the_image_s_healthcheck_passes_on_a_live_frontend(running: Running) -> None:
    check = image().healthcheck
    assert check is not None
    port = _port(running.frontend.url)
    assert run_check(check[2], {"ROTOR_PORT": str(port)}) == 0
    assert run_check(check[2], {"ROTOR_PORT": str(free_port())}) != 0


@pytest.mark.e2e
def test_the_image_s_healthcheck_passes_on_a_live_worker(running: Running) -> None:
    check = image().healthcheck
    assert check is not None
    port = _port(running.worker.system_url or "")
    # the frontend's port given too: the worker's own is the one asked
    frontend = str(_port(running.frontend.url))
    assert run_check(check[2], {"ROTOR_SYSTEM_PORT": str(port), "ROTOR_PORT": frontend}) == 0
    idle = str(free_port())
    assert run_check(check[2], {"ROTOR_SYSTEM_PORT": idle, "ROTOR_PORT": frontend}) != 0


@pytest.mark.e2e
def test_compose_s_healthchecks_pass_on_live_processes(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = parsed_services(monkeypatch)
    found = services()
    live = {
        "nats": (args["nats"].port, running.nats.port),
        "frontend": (args["frontend"].port, _port(running.frontend.url)),
        "worker-1": (args["worker-1"].system_port, _port(running.worker.system_url or "")),
    }
    for name, (declared, real) in live.items():
        code = health_code(found[name])
        assert run_check(_with_port(code, declared, real)) == 0, name
        assert run_check(_with_port(code, declared, free_port())) != 0, name
