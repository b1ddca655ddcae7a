"""`rotor run --http-workers 2`: two HTTP processes on one port, the engine in
a third, reached over a unix socket. Clients get the same answers as from one
process; a client that leaves aborts the engine's work; refusals stay 400s."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from support.server import Server, free_port, rotor_server
from support.wait import wait_for

TEXT = "Two processes, one port: every answer is still the question. 東京 🙂"


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def engine_state(client: httpx.Client, server: Server) -> dict:
    """The engine's state as the HTTP process on `client`'s connection last heard it."""
    r = client.get(server.url + "/health")
    assert r.status_code == 200, r.text
    return r.json()["engines"]["echo"]


def chat(server: Server, text: str, stream: bool) -> str:
    body = {"model": "echo", "messages": [{"role": "user", "content": text}], "stream": stream}
    with httpx.Client(timeout=20) as client:  # a fresh connection: either process may take it
        if not stream:
            r = client.post(server.v1 + "/chat/completions", json=body)
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["message"]["content"]
        out = []
        with client.stream("POST", server.v1 + "/chat/completions", json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    for choice in json.loads(line[6:])["choices"]:
                        out.append(choice["delta"].get("content") or "")
        return "".join(out)


def test_two_processes_answer_every_request_as_one_would() -> None:
    with rotor_server("--http-workers", "2") as server:
        assert len(children(server.process.pid)) == 2
        texts = [f"{TEXT} #{i}" for i in range(24)]
        with ThreadPoolExecutor(8) as pool:
            streamed = list(pool.map(lambda t: chat(server, t, True), texts))
            whole = list(pool.map(lambda t: chat(server, t, False), texts))
        assert streamed == texts
        assert whole == texts
        # The official SDK over keep-alive connections, too.
        client = server.openai()
        for text in texts[:4]:
            chunks = client.chat.completions.create(
                model="echo", messages=[{"role": "user", "content": text}], stream=True
            )
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text


def test_a_client_that_leaves_aborts_the_engine_request() -> None:
    long_text = "x" * 2000  # 40 s at 20 ms a character: only an abort ends it early
    with rotor_server("--http-workers", "2", env={"ROTOR_ECHO_DELAY_MS": "20"}) as server:
        body = {"model": "echo", "messages": [{"role": "user", "content": long_text}]}
        with (
            httpx.Client(timeout=20) as client,
            client.stream(
                "POST", server.v1 + "/chat/completions", json={**body, "stream": True}
            ) as r,
        ):
            lines = r.iter_lines()
            seen = [line for _, line in zip(range(8), lines, strict=False)]
            assert any('"content":"x"' in line for line in seen)
            # leaving the block closed the connection mid-stream
        # One keep-alive connection: every read asks the same HTTP process,
        # whose view of the engine is refreshed a few times a second.
        with httpx.Client(timeout=5) as poll:
            states: list[dict] = []

            def let_go() -> bool:
                states.append(engine_state(poll, server))
                return states[-1]["tokens_generated"] > 0 and states[-1]["active_requests"] == 0

            wait_for("the engine to let go of the request", let_go, detail=lambda: str(states[-1]))
            generated = states[-1]["tokens_generated"]
            assert generated < len(long_text)
            # A request answered afterwards (1 s at 20 ms a character: the
            # left one would have had ~50 more): the engine made its tokens alone.
            probe = "p" * 50
            assert chat(server, probe, False) == probe

            def counted() -> bool:
                states.append(engine_state(poll, server))
                return states[-1]["tokens_generated"] >= generated + len(probe)

            wait_for("the answered request in the engine's count", counted)
            assert states[-1]["tokens_generated"] == generated + len(probe)  # nothing ran on


def test_a_refusal_from_the_engine_process_is_a_400_naming_the_field() -> None:
    with rotor_server("out=mocker", "--speedup-ratio", "0", "--http-workers", "2") as server:
        r = httpx.post(
            server.v1 + "/chat/completions",
            json={
                "model": "mock-model",
                "messages": [{"role": "user", "content": "hi"}],
                "mock": {"output": 5},
            },
            timeout=10,
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "mock"
        ok = httpx.post(
            server.v1 + "/chat/completions",
            json={
                "model": "mock-model",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 5,
                "ignore_eos": True,
            },
            timeout=10,
        )
        assert ok.status_code == 200, ok.text
        assert ok.json()["usage"]["completion_tokens"] == 5


def test_a_port_in_use_stops_startup_with_a_message() -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        proc = subprocess.run(
            [sys.executable, "-m", "rotor.cli", "run", "--http-workers", "2", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "ROTOR_ECHO_DELAY_MS": "0"},
        )
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr


def running(pid: int) -> bool:
    """The process exists and is not a zombie waiting for a reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_a_killed_parent_takes_its_http_processes_with_it() -> None:
    with rotor_server("--http-workers", "2") as server:
        pids = children(server.process.pid)
        assert len(pids) == 2 and all(running(p) for p in pids)
        server.process.kill()
        server.process.wait(10)
        wait_for(
            "the HTTP processes to end",
            lambda: not any(running(p) for p in pids),
            detail=lambda: f"orphans left: {[p for p in pids if running(p)]}",
        )
