"""One request must never freeze the server, memory stays bounded, overload is
refused cleanly (issue 15). Each test drives a real server on loopback and
observes the effect: /live answering while the hostile request runs, RSS,
metrics, a stream's last events, the log's lines."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.scripts import hermes
from support.server import free_port, rotor_server
from support.sse import data_events
from support.wait import wait_for

MOCKER = ("out=mocker", "--speedup-ratio", "0")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def while_running(url: str, hostile: Callable[[], Any]) -> tuple[Any, int, int]:
    """Run `hostile()` in a thread and poll /live until it returns: its
    result, how many /live calls answered while it ran, and how many did not."""
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(hostile()))
    worker.start()
    answered = missed = 0
    while worker.is_alive():
        try:
            httpx.get(url + "/live", timeout=2).raise_for_status()
            answered += 1
        except httpx.HTTPError:
            missed += 1
        time.sleep(0.02)
    worker.join()
    return result[0], answered, missed


def chat(url: str, body: dict[str, Any], timeout: float = 60) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout)


# -- 1, 3: bound the work before doing it ------------------------------------


def test_oversized_prompts_are_refused_before_any_rendering() -> None:
    with rotor_server(*MOCKER) as srv:
        before = rss_mb(srv.process.pid)
        huge = "word " * 2_000_000  # 10 MB: far more than 32k tokens can hold
        cases = [
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": huge}]}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": ""}] * 300_000}),
            ("/tokenize", {"prompt": huge}),
            ("/v1/completions", {"prompt": huge, "max_tokens": 1}),
        ]
        for path, body in cases:
            r, answered, missed = while_running(
                srv.url, lambda p=path, b=body: httpx.post(srv.url + p, json=b, timeout=60)
            )
            assert r.status_code == 400, r.text
            assert "context" in r.json()["error"]["message"]
            assert missed == 0, f"{path}: /live did not answer {missed} time(s)"
        grown = rss_mb(srv.process.pid) - before
        assert grown < 400, f"RSS grew by {grown:.0f} MB"


def test_fan_out_over_the_choice_limit_is_a_400_naming_it() -> None:
    with rotor_server(*MOCKER) as srv:
        body = {"prompt": [[1, 2, 3]] * 200, "n": 16, "max_tokens": 1}
        r = httpx.post(srv.v1 + "/completions", json=body, timeout=30)
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["param"] == "n" and "at most 128 choices" in error["message"]
        ok = {"prompt": [[1, 2, 3]] * 8, "n": 16, "max_tokens": 1}
        assert httpx.post(srv.v1 + "/completions", json=ok, timeout=30).status_code == 200


# -- 4: templates get a time budget ------------------------------------------

ENDLESS = (
    "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
    "{% endfor %}{% endfor %}{% endfor %}"
)


def test_an_endless_template_is_stopped_at_its_budget_and_never_exhausts_the_pool(
    tmp_path: Path,
) -> None:
    template = tmp_path / "endless.jinja"
    template.write_text(ENDLESS)
    args = (*MOCKER, "--chat-template", str(template), "--template-timeout", "1")
    with rotor_server(*args) as srv:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

        def six() -> list[httpx.Response]:  # more than the preparer's threads, at once
            out: list[httpx.Response] = []
            threads = [
                threading.Thread(target=lambda: out.append(chat(srv.url, body))) for _ in range(6)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return out

        responses, answered, missed = while_running(srv.url, six)
        assert missed == 0 and answered > 0
        for r in responses:
            assert r.status_code == 400, r.text
            assert "budget of 1 s" in r.json()["error"]["message"]
        # The workers are free again: a long /tokenize prompt runs in the same pool.
        r = httpx.post(srv.url + "/tokenize", json={"prompt": "a b " * 3000}, timeout=30)
        assert r.status_code == 200 and r.json()["count"] > 0
        assert srv.metric("rotor_requests_in_flight") == 0


@pytest.mark.parametrize(
    "source",
    [
        "{{ lipsum(20000) }}",
        "{{ '{:>10000000}'.format('x') }}",
        "{% for i in range(100000) %}{{ 'x' * 900000 }}{% endfor %}",
    ],
)
def test_templates_cannot_grow_memory(tmp_path: Path, source: str) -> None:
    template = tmp_path / "big.jinja"
    template.write_text(source)
    with rotor_server(*MOCKER, "--chat-template", str(template)) as srv:
        before = rss_mb(srv.process.pid)
        r = chat(srv.url, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "messages"
        grown = rss_mb(srv.process.pid) - before
        assert grown < 100, f"RSS grew by {grown:.0f} MB"


# -- 2: slow readers ---------------------------------------------------------


def _slow_reader(port: int, body: dict[str, Any]) -> socket.socket:
    """A client that sends a streaming request, then reads nothing."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    payload = json.dumps(body).encode()
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    return sock


def test_slow_readers_stop_the_engine_and_their_disconnect_stalls_nothing() -> None:
    with rotor_server(*MOCKER) as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        before = rss_mb(srv.process.pid)
        body = {
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": 30000,
            "ignore_eos": True,
            "logprobs": True,
            "top_logprobs": 5,
        }
        readers = [_slow_reader(port, body) for _ in range(10)]
        probe = {"messages": [{"role": "user", "content": "probe"}], "max_tokens": 3}
        probe |= {"ignore_eos": True}
        made: list[float] = []

        def stopped() -> bool:
            """A request answered meanwhile, and the engine made its tokens
            alone: it stepped, and none of the ten streams had a token in the
            steps. (Unthrottled it stops too, at the end: after 300k tokens.)"""
            generated = srv.metric("rotor_engine_generated_tokens_total")
            r = chat(srv.url, probe)
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text
            made.append(srv.metric("rotor_engine_generated_tokens_total"))
            return made[-1] - generated == 3

        wait_for("the engine to stop making tokens for the unread streams", stopped, 120)
        assert srv.metric("rotor_engine_active_requests") == 10  # held, not ended
        assert made[-1] < 10 * 30000 / 2, f"{made[-1]} tokens made for clients reading nothing"
        grown = rss_mb(srv.process.pid) - before

        def close_all() -> None:
            for s in readers:
                s.close()
            wait_for(
                "the engine to let the streams go",
                lambda: srv.metric("rotor_engine_active_requests") == 0,
            )

        _, answered, missed = while_running(srv.url, close_all)
        assert missed == 0
        assert grown < 300, f"RSS grew by {grown:.0f} MB"
        assert srv.metric("rotor_requests_in_flight") == 0


# -- 5: model output nested deeply is content, not a 500 -----------------------


def test_deeply_nested_tool_arguments_are_released_as_content() -> None:
    deep = "[" * 3000 + "]" * 3000
    output = '<tool_call>{"name": "f", "arguments": {"a": ' + deep + "}}</tool_call>"
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with rotor_server(*MOCKER, "--tool-call-parser", "hermes") as srv:
        body = {
            "messages": [{"role": "user", "content": "hi"}],
            "tools": tools,
            "mock": {"output": output, "end": "eos", "tokens_per_step": 64},
        }
        r = chat(srv.url, body)
        assert r.status_code == 200, r.text
        message = r.json()["choices"][0]["message"]
        assert not message.get("tool_calls")
        assert message["content"] == output
        ok = chat(srv.url, {**body, "mock": {"output": hermes("f", {"a": 1}), "end": "eos"}})
        assert ok.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "f"


# -- 6: admission control ----------------------------------------------------


def test_requests_beyond_the_queue_limit_get_503_before_any_stream_byte() -> None:
    args = ("out=mocker", "--max-num-seqs", "1", "--max-queued-requests", "2")
    with rotor_server(*args) as srv:
        long = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 300}
        long |= {"ignore_eos": True, "stream": True}
        client = httpx.Client(timeout=30)
        running = client.send(
            client.build_request("POST", srv.v1 + "/chat/completions", json=long), stream=True
        )
        try:
            assert running.status_code == 200  # it holds the only sequence

            def wait_in_queue() -> None:
                try:
                    chat(srv.url, long, 30)
                except httpx.HTTPError:
                    pass  # the server stops under it at the end of the test

            waiting = [threading.Thread(target=wait_in_queue, daemon=True) for _ in range(2)]
            for t in waiting:
                t.start()
            wait_for("two requests in the queue", lambda: srv.metric("rotor_queued_requests") >= 2)
            assert srv.metric("rotor_queued_requests") == 2
            r = chat(srv.url, long)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.headers["content-type"] == "application/json"
            assert "2 queued requests" in r.json()["error"]["message"]
            a = httpx.post(
                srv.v1 + "/messages",
                json={
                    "model": "mock-model",
                    "max_tokens": 5,
                    "stream": True,
                    "messages": [{"role": "user", "content": "hi"}],
                },
                timeout=30,
            )
            assert a.status_code == 503 and a.json()["type"] == "error"
            assert srv.metric("rotor_requests_refused_overloaded_total") == 2
        finally:
            running.close()
            client.close()


# -- 7: SIGTERM with streams longer than the grace ---------------------------


def test_sigterm_ends_streams_longer_than_the_grace_with_an_error_then_the_end() -> None:
    env = {"ROTOR_ECHO_DELAY_MS": "10"}
    with rotor_server("--shutdown-grace", "1", env=env) as srv:
        text = "z" * 3000  # 30 s at 10 ms per token: far longer than the grace
        received: dict[str, list[str]] = {"openai": [], "anthropic": []}
        bodies = {
            "openai": ("/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}),
            "anthropic": (
                "/v1/messages",
                {
                    "model": "echo",
                    "max_tokens": 5000,
                    "messages": [{"role": "user", "content": text}],
                },
            ),
        }

        def consume(kind: str) -> None:
            path, body = bodies[kind]
            with httpx.stream(
                "POST", srv.url + path, json={**body, "stream": True}, timeout=30
            ) as r:
                for piece in r.iter_text():
                    received[kind].append(piece)

        readers = [threading.Thread(target=consume, args=(k,)) for k in received]
        for t in readers:
            t.start()
        wait_for("both streams to begin", lambda: all(received.values()))
        srv.process.send_signal(signal.SIGTERM)
        for t in readers:
            t.join(20)
            assert not t.is_alive()
        assert srv.process.wait(20) in (0, -signal.SIGTERM)
        log = srv.log
    chunks = data_events("".join(received["openai"]))
    assert "".join(received["openai"]).endswith("data: [DONE]\n\n")
    assert "shutting down" in chunks[-1]["error"]["message"]
    anthropic = "".join(received["anthropic"])
    last = anthropic.strip().split("\n\n")[-1]
    assert last.startswith("event: error") and "shutting down" in last
    assert log.count("shutdown: the 1 s grace is over; ending 2 open stream(s)") == 1
    assert "Traceback" not in log


# -- 8: auth -------------------------------------------------------------------


def test_tokenize_needs_the_key_and_duplicate_credentials_are_refused() -> None:
    with rotor_server(*MOCKER, "--api-key", "sekret") as srv:
        for path, body in (("/tokenize", {"prompt": "hi"}), ("/detokenize", {"tokens": [1]})):
            assert httpx.post(srv.url + path, json=body).status_code == 401
            good = httpx.post(srv.url + path, json=body, headers={"authorization": "Bearer sekret"})
            assert good.status_code == 200
        twice = [("authorization", "Bearer sekret"), ("authorization", "Bearer other")]
        r = httpx.get(srv.v1 + "/models", headers=twice)
        assert r.status_code == 400 and "duplicate" in r.json()["error"]["message"]
        for probe in ("/live", "/health", "/metrics"):
            assert httpx.get(srv.url + probe).status_code == 200


def test_an_empty_api_key_stops_startup() -> None:
    cmd = [sys.executable, "-m", "rotor.cli", "run", "--api-key", "", "--port", str(free_port())]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "--api-key is empty" in done.stderr


# -- 9: a client that leaves while sending its body ----------------------------


def test_a_body_cut_short_logs_one_line_and_counts() -> None:
    with rotor_server() as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        for sent in range(1, 6):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                    b'content-type: application/json\r\ncontent-length: 100000\r\n\r\n{"mes'
                )
            wait_for(  # this one counted before the next is sent
                f"body {sent} counted as cut short",
                lambda n=sent: srv.metric("rotor_body_aborted_total") >= n,
            )
        assert srv.metric("rotor_body_aborted_total") == 5
        log = srv.log
    assert log.count("client disconnected while sending the body") == 5
    assert "Traceback" not in log
