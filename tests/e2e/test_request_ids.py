"""The client's `x-request-id` names its response; the engine never sees it.

Two clients may send the same id at once (retries, a proxy that stamps one id
on a fan-out, ...), and a completions request's per-prompt engine requests
must not collide with another client's id either. Each response must still
be complete and correct, named after the id its client sent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from support.server import Server, rotor_server
from support.sse import data_events

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def echo() -> Iterator[Server]:
    # 20 ms a character: a 40-character answer streams for most of a second.
    with rotor_server(env={"ROTOR_ECHO_DELAY_MS": "20"}) as srv:
        yield srv


@pytest.fixture(scope="module")
def mocker() -> Iterator[Server]:
    # Real pace (~10 ms a token): the first answer is still running when the second starts.
    with rotor_server("out=mocker") as srv:
        yield srv


def stream(
    url: str, body: dict[str, Any], rid: str, started: threading.Event | None = None
) -> tuple[httpx.Headers, list[dict[str, Any]]]:
    """POST a streaming request with `x-request-id: rid`; `started` is set once
    generated text has arrived (the request is running in the engine)."""
    received: list[str] = []
    with httpx.stream(
        "POST", url, json=body, headers={"x-request-id": rid}, timeout=TIMEOUT_S
    ) as r:
        assert r.status_code == 200, r.read()
        for piece in r.iter_text():
            received.append(piece)
            if started is not None and "".join(received).count("data: ") >= 3:
                started.set()
        headers = r.headers
    if started is not None:
        started.set()
    return headers, data_events("".join(received))


def chat_text(chunks: list[dict[str, Any]]) -> tuple[str, list[str | None]]:
    errors = [ch for ch in chunks if "error" in ch]
    assert not errors, errors
    text = "".join(c["delta"].get("content") or "" for ch in chunks for c in ch["choices"])
    finishes = [c["finish_reason"] for ch in chunks for c in ch["choices"] if c["finish_reason"]]
    return text, finishes


def run_overlapping(
    first: tuple[str, dict[str, Any], str], second: tuple[str, dict[str, Any], str]
) -> tuple[tuple[httpx.Headers, list[Any]], tuple[httpx.Headers, list[Any]]]:
    """Start `first`; once it streams, start `second`; both (url, body, rid)."""
    started = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(stream, *first, started)
        assert started.wait(TIMEOUT_S), "the first request never streamed"
        b = pool.submit(stream, *second)
        return a.result(TIMEOUT_S), b.result(TIMEOUT_S)


def test_same_request_id_twice_at_once_on_the_echo(echo: Server) -> None:
    url = echo.v1 + "/chat/completions"
    long, short = "a" * 40, "b" * 10

    def body(text: str) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": text}], "stream": True}

    (ha, a), (hb, b) = run_overlapping((url, body(long), "same-id"), (url, body(short), "same-id"))
    assert chat_text(a) == (long, ["stop"])
    assert chat_text(b) == (short, ["stop"])
    for headers, chunks in ((ha, a), (hb, b)):
        assert headers["x-request-id"] == "same-id"
        assert {ch["id"] for ch in chunks} == {"chatcmpl-same-id"}


def test_same_request_id_twice_at_once_on_the_mocker(mocker: Server) -> None:
    url = mocker.v1 + "/chat/completions"
    first, second = "one two three four " * 5, "five six seven"

    def body(output: str) -> dict[str, Any]:
        return {
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": 200,
            "mock": {"output": output},
        }

    (ha, a), (hb, b) = run_overlapping((url, body(first), "dup"), (url, body(second), "dup"))
    assert chat_text(a) == (first, ["stop"])
    assert chat_text(b) == (second, ["stop"])
    assert ha["x-request-id"] == hb["x-request-id"] == "dup"


def test_completion_prompts_do_not_collide_with_another_clients_id(echo: Server) -> None:
    """A two-prompt completions request under `abc` and a chat under `abc-1`."""
    prompts = ["p" * 40, "q" * 40]
    completion = (
        echo.v1 + "/completions",
        {"prompt": prompts, "stream": True, "max_tokens": 100},
        "abc",
    )
    chat = (
        echo.v1 + "/chat/completions",
        {"messages": [{"role": "user", "content": "c" * 10}], "stream": True},
        "abc-1",
    )
    (_, a), (_, b) = run_overlapping(completion, chat)
    assert not [ch for ch in a if "error" in ch]
    texts = ["", ""]
    finishes: list[Any] = [None, None]
    for ch in a:
        for c in ch["choices"]:
            texts[c["index"]] += c["text"]
            finishes[c["index"]] = c["finish_reason"] or finishes[c["index"]]
    assert texts == prompts and finishes == ["stop", "stop"]
    assert {ch["id"] for ch in a} == {"cmpl-abc"}
    assert chat_text(b) == ("c" * 10, ["stop"])


def test_error_responses_carry_the_sanitised_request_id(echo: Server) -> None:
    url = echo.v1 + "/chat/completions"
    bad_body = {"messages": [], "stream": False}
    r = httpx.post(url, json=bad_body, headers={"x-request-id": "err-1"}, timeout=5)
    assert r.status_code == 400 and r.headers["x-request-id"] == "err-1"
    r = httpx.post(url, json=bad_body, headers={"x-request-id": "not a token!"}, timeout=5)
    assert r.status_code == 400
    assert r.headers["x-request-id"] != "not a token!"
    assert r.headers["x-request-id"].isalnum()
