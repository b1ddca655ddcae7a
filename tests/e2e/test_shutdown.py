"""Graceful shutdown: stop accepting, let running streams finish, then exit."""

from __future__ import annotations

import signal
import threading

import httpx
import pytest

from support.server import rotor_server


def test_sigterm_lets_a_running_stream_finish_and_refuses_new_work() -> None:
    text = "z" * 150  # 1.5 s at 10 ms per token
    with rotor_server(env={"ROTOR_ECHO_DELAY_MS": "10"}) as srv:
        body = {"model": "echo", "messages": [{"role": "user", "content": text}], "stream": True}
        started = threading.Event()
        received: list[str] = []

        def consume() -> None:
            with httpx.stream("POST", srv.v1 + "/chat/completions", json=body, timeout=30) as r:
                for line in r.iter_lines():
                    received.append(line)
                    if len(received) > 6:
                        started.set()

        reader = threading.Thread(target=consume)
        reader.start()
        assert started.wait(10), "the stream did not start"
        srv.process.send_signal(signal.SIGTERM)
        with pytest.raises(httpx.HTTPError):  # the listening socket is closed at once
            for _ in range(100):
                httpx.get(srv.url + "/live", timeout=1)
                threading.Event().wait(0.01)
        reader.join(30)
        assert not reader.is_alive()
        # uvicorn re-raises the signal once shutdown is complete (exit by SIGTERM).
        assert srv.process.wait(30) in (0, -signal.SIGTERM)
    data = [line[6:] for line in received if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    content = "".join(
        c["delta"].get("content") or ""
        for chunk in data[:-1]
        for c in httpx.Response(200, content=chunk).json()["choices"]
    )
    assert content == text
