"""Graceful shutdown: stop accepting, let running streams finish, then exit."""

from __future__ import annotations

import signal
import threading
import time

import httpx

from support.server import rotor_server
from support.sse import data_events

# The observable order, not a stopwatch: new connections are refused while
# the running stream still goes on. The stream is long enough (8 s) for a
# loaded machine to get there; the loop ends at refusal or at the stream's end.
# The grace period is far longer than the stream, however slow the machine:
# this test is about letting it finish, not about the grace running out.


def test_sigterm_lets_a_running_stream_finish_and_refuses_new_work() -> None:
    text = "z" * 800  # 8 s at 10 ms per token
    with rotor_server("--shutdown-grace", "120", env={"ROTOR_ECHO_DELAY_MS": "10"}) as srv:
        body = {"model": "echo", "messages": [{"role": "user", "content": text}], "stream": True}
        started = threading.Event()
        received: list[str] = []

        def consume() -> None:
            with httpx.stream("POST", srv.v1 + "/chat/completions", json=body, timeout=30) as r:
                for piece in r.iter_text():
                    received.append(piece)
                    if "".join(received).count("data: ") > 6:
                        started.set()

        reader = threading.Thread(target=consume)
        reader.start()
        assert started.wait(10), "the stream did not start"
        srv.process.send_signal(signal.SIGTERM)
        refused = False
        while not refused and reader.is_alive():
            try:
                httpx.get(srv.url + "/live", timeout=0.2)
            except httpx.HTTPError:
                refused = True  # the listening socket is closed
            else:
                time.sleep(0.01)
        # Refused while the running stream goes on: not merely because the server exited.
        assert refused and reader.is_alive(), "the stream was over before new work was refused"
        reader.join(120)
        assert not reader.is_alive()
        # uvicorn re-raises the signal once shutdown is complete (exit by SIGTERM).
        assert srv.process.wait(120) in (0, -signal.SIGTERM)
    chunks = data_events("".join(received))
    content = "".join(c["delta"].get("content") or "" for chunk in chunks for c in chunk["choices"])
    assert content == text
