"""Disaggregated serving for real: a nats-server, prefill and decode `rotor
worker` processes (the mocker, whose KV blocks move between them over NATS),
frontends deciding per request, and faults made with real signals."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    EngineError,
    EngineRequest,
    StopParams,
)

from support.cluster import (
    Frontend,
    Nats,
    Worker,
    nats_server,
    start_frontend,
    start_worker,
    wait_for,
)
from support.plane import request_plane
from support.server import rotor_server
from support.sse import live_chunks

pytestmark = pytest.mark.e2e

MODEL = "mock-model"
FAST = ("out=mocker", "--speedup-ratio", "0")
SLOW = ("out=mocker", "--speedup-ratio", "1")  # 10 ms per decode step
# A prefill that takes seconds: long enough to kill or leave it midway
SLOW_PREFILL = (*SLOW, "--prefill-ms-per-token", "10", "--max-num-batched-tokens", "64")
PREFILL = ("--disaggregation-mode", "prefill")
DECODE = ("--disaggregation-mode", "decode")
STORY = " ".join(f"word{i}" for i in range(120))
BLOCK = 16  # the mocker's block size


def long_system(topic: str) -> str:
    """A system prompt of several hundred tokens, its own per topic."""
    return f"You are an expert on {topic}. " + " ".join(f"{topic}-fact-{i}." for i in range(80))


def chat(system: str, question: str = "Tell me a story", **extra: Any) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return {"model": MODEL, "messages": messages, **extra}


def post(frontend: Frontend, body: dict[str, Any]) -> httpx.Response:
    r = httpx.post(frontend.v1 + "/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r


def stream(frontend: Frontend, body: dict[str, Any], on_text: Any = None) -> tuple[str, dict, str]:
    """(text, usage, x-rotor-worker) of one streamed chat request."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    text: list[str] = []
    usage: dict[str, Any] = {}
    with httpx.stream("POST", frontend.v1 + "/chat/completions", json=body, timeout=90) as r:
        assert r.status_code == 200, r.read()
        header = r.headers.get("x-rotor-worker", "")
        for chunk in live_chunks(r):
            for c in chunk["choices"]:
                text.append(c["delta"].get("content") or "")
            usage = chunk.get("usage") or usage
            if on_text is not None:
                on_text("".join(text))
    return "".join(text), usage, header


def decisions(frontend: Frontend, where: str, reason: str) -> float:
    return frontend.metric(
        "rotor_disagg_prefill_total", f'where="{where}",reason="{reason}"'
    ) + frontend.metric("rotor_disagg_prefill_total", f'reason="{reason}",where="{where}"')


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


@pytest.fixture(scope="module")
def pair(nats: Nats) -> Iterator[tuple[Worker, Worker]]:
    """One prefill and one decode worker of `mock-model`."""
    prefill = start_worker(nats, *FAST, *PREFILL, system=True)
    decode = start_worker(nats, *FAST, *DECODE, system=True)
    try:
        yield prefill, decode
    finally:
        prefill.proc.stop()
        decode.proc.stop()


@pytest.fixture(scope="module")
def always(nats: Nats, pair: tuple[Worker, Worker]) -> Iterator[Frontend]:
    """A frontend that prefills every request remotely."""
    frontend = start_frontend(nats, "--disagg-policy", "always", "--router", "kv")
    try:
        frontend.wait_workers(MODEL, {w.id for w in pair})
        yield frontend
    finally:
        frontend.proc.stop()


@pytest.fixture(scope="module")
def isl(nats: Nats, pair: tuple[Worker, Worker]) -> Iterator[Frontend]:
    """A second frontend on the same pool, deciding by effective prompt length."""
    frontend = start_frontend(
        nats, "--disagg-policy", "isl", "--disagg-min-tokens", "200", "--router", "kv"
    )
    try:
        frontend.wait_workers(MODEL, {w.id for w in pair})
        yield frontend
    finally:
        frontend.proc.stop()


# -- the answer is the same -----------------------------------------------------------------


def test_prefill_and_decode_answer_as_rotor_run(
    always: Frontend, pair: tuple[Worker, Worker]
) -> None:
    prefill, decode = pair
    body = chat(long_system("ships"), mock={"output": STORY}, max_tokens=500)
    remote = decisions(always, "remote", "always")
    whole = post(always, body)
    assert whole.headers["x-rotor-worker"] == f"prefill={prefill.id}, decode={decode.id}"
    text, usage, header = stream(always, body)
    assert header == f"prefill={prefill.id}, decode={decode.id}"
    with rotor_server(*FAST) as single:
        alone = post(single, body).json()
        alone_text, alone_usage, _ = stream(single, body)
    assert whole.json()["choices"][0]["message"]["content"] == STORY
    assert whole.json()["choices"][0]["finish_reason"] == alone["choices"][0]["finish_reason"]
    assert text == alone_text == STORY
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert whole.json()["usage"][key] == alone["usage"][key]
        assert usage[key] == alone_usage[key]
    assert decisions(always, "remote", "always") - remote == 2


def test_the_pins_are_freed_by_the_fetch_and_a_held_prefix_is_not_fetched_again(
    always: Frontend, pair: tuple[Worker, Worker]
) -> None:
    prefill, decode = pair
    fetched = decode.metric("rotor_engine_kv_fetched_blocks_total")
    expired = prefill.metric("rotor_engine_kv_hold_timeouts_total")
    first = post(always, chat(long_system("bees"), "first question", max_tokens=2)).json()
    prompt_blocks = first["usage"]["prompt_tokens"] // BLOCK
    wait_for(
        "the prefill's pins freed", lambda: prefill.metric("rotor_engine_kv_blocks_pinned") == 0
    )
    first_fetch = decode.metric("rotor_engine_kv_fetched_blocks_total") - fetched
    # every full block of the prompt, less what the decode worker held already
    # (the chat template's opening, from the module's earlier requests)
    assert prompt_blocks - 2 <= first_fetch <= prompt_blocks
    assert prefill.metric("rotor_engine_kv_hold_timeouts_total") == expired  # fetched, not expired
    # the same long prefix again: the decode worker holds it, and fetches only the new tail
    second = post(always, chat(long_system("bees"), "another question", max_tokens=2)).json()
    second_fetch = decode.metric("rotor_engine_kv_fetched_blocks_total") - fetched - first_fetch
    assert second_fetch < first_fetch - 10
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    wait_for("the pins freed again", lambda: prefill.metric("rotor_engine_kv_blocks_pinned") == 0)


def test_an_answer_of_one_token_or_eos_ends_at_the_prefill_and_frees_its_pins(
    always: Frontend, pair: tuple[Worker, Worker]
) -> None:
    prefill, decode = pair
    generated = decode.metric("rotor_engine_generated_tokens_total")
    expired = prefill.metric("rotor_engine_kv_hold_timeouts_total")
    whole = post(always, chat(long_system("moths"), max_tokens=1))
    assert whole.headers["x-rotor-worker"] == f"prefill={prefill.id}, decode={decode.id}"
    r = whole.json()
    assert r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 1
    # nobody will fetch: the frontend tells the prefill worker so, at once
    wait_for("the pins freed", lambda: prefill.metric("rotor_engine_kv_blocks_pinned") == 0)
    assert prefill.metric("rotor_engine_kv_hold_timeouts_total") == expired
    assert decode.metric("rotor_engine_generated_tokens_total") == generated  # never asked
    # a first token that is the model's EOS ends the answer there too
    r = post(always, chat(long_system("gnats"), mock={"output": ""}, max_tokens=50)).json()
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["choices"][0]["message"]["content"] == ""
    wait_for("the pins freed", lambda: prefill.metric("rotor_engine_kv_blocks_pinned") == 0)
    assert prefill.metric("rotor_engine_kv_hold_timeouts_total") == expired
    assert decode.metric("rotor_engine_generated_tokens_total") == generated


def test_the_isl_policy_decides_on_the_effective_prompt(
    isl: Frontend, pair: tuple[Worker, Worker]
) -> None:
    prefill, decode = pair
    short = decisions(isl, "local", "short")
    long = decisions(isl, "remote", "long")
    cached = decisions(isl, "local", "cached")
    r = post(isl, chat("Be brief.", "hi", max_tokens=2))
    assert r.headers["x-rotor-worker"] == decode.id  # prefilled where it decodes
    assert decisions(isl, "local", "short") - short == 1
    r = post(isl, chat(long_system("clocks"), "q1", max_tokens=2))
    assert r.headers["x-rotor-worker"] == f"prefill={prefill.id}, decode={decode.id}"
    assert decisions(isl, "remote", "long") - long == 1
    # once the frontend's index holds the decode worker's new blocks (its KV
    # events, on their way), the same prompt stays where it is cached
    routed: list[str] = []

    def stays_local() -> bool:
        again = post(isl, chat(long_system("clocks"), "q1", max_tokens=2))
        routed.append(again.headers["x-rotor-worker"])
        return routed[-1] == decode.id

    wait_for("the prompt to be prefilled where it is cached", stays_local)
    # what is left of it to compute is short (the ratio rule, `cached`, is the
    # policy's unit tests')
    assert decisions(isl, "local", "short") - short == 2
    assert decisions(isl, "local", "cached") == cached
    assert decisions(isl, "remote", "long") - long == len(routed)  # the first, and any before


def test_pools_are_shown_and_http_workers_frontends_disaggregate(
    nats: Nats, pair: tuple[Worker, Worker], always: Frontend
) -> None:
    prefill, decode = pair
    health = httpx.get(always.url + "/health", timeout=5).json()
    assert health["pools"][MODEL] == {"prefill": [prefill.id], "decode": [decode.id]}
    roles = {w["id"]: w["role"] for w in health["workers"][MODEL]}
    assert roles == {prefill.id: "prefill", decode.id: "decode"}
    listed = {m["id"]: m for m in httpx.get(always.v1 + "/models", timeout=5).json()["data"]}
    assert listed[MODEL]["pools"] == {"prefill": [prefill.id], "decode": [decode.id]}
    frontend = start_frontend(nats, "--http-workers", "2", "--disagg-policy", "always")
    try:
        frontend.wait_workers(MODEL, {prefill.id, decode.id})
        for _ in range(3):  # whichever HTTP process answers
            r = post(frontend, chat("Be brief.", mock={"output": STORY}))
            assert r.headers["x-rotor-worker"] == f"prefill={prefill.id}, decode={decode.id}"
            assert r.json()["choices"][0]["message"]["content"] == STORY
    finally:
        frontend.proc.stop()


# -- the hold and its timeout, seen from a worker's own request plane -------------------------


def test_an_unfetched_hold_expires_and_its_decode_computes_the_prompt(nats: Nats) -> None:
    model = "hold-model"
    prefill = start_worker(
        nats, *FAST, *PREFILL, "--model-name", model, "--kv-hold-timeout", "2", system=True
    )
    decode = start_worker(nats, *FAST, *DECODE, "--model-name", model, system=True)
    prompt = list(range(100, 100 + 20 * BLOCK + 5))
    try:
        with request_plane(nats) as plane:
            job = EngineRequest(
                "hold-1-p", model, prompt, stop=StopParams(max_tokens=1, ignore_eos=True),
                annotations={PREFILL_ONLY: True},
            )  # fmt: skip
            outputs = plane.collect(prefill.id, job)
            assert len(outputs) == 1 and outputs[0].finish == "length"
            transfer = outputs[0].kv_transfer
            assert transfer is not None and len(transfer["block_hashes"]) == 20
            assert prefill.metric("rotor_engine_kv_blocks_pinned") == 20
            # nobody fetches: the hold runs out, and says so
            wait_for(
                "the hold to expire", lambda: prefill.metric("rotor_engine_kv_blocks_pinned") == 0
            )
            assert prefill.metric("rotor_engine_kv_hold_timeouts_total") == 1
            # a decode worker that comes too late, with disaggregation enforced,
            # says why before any output
            resumed = prompt + outputs[0].token_ids
            enforced = EngineRequest(
                "hold-1-d", model, resumed, stop=StopParams(max_tokens=5, ignore_eos=True),
                annotations={KV_TRANSFER: {**transfer, "worker": prefill.id, "enforce": True}},
            )  # fmt: skip
            with pytest.raises(EngineError) as e:
                plane.collect(decode.id, enforced)
            assert e.value.cause == "kv_transfer"
            assert decode.metric("rotor_engine_kv_fetch_failures_total") == 1
            # ... and otherwise computes the prompt itself
            late = EngineRequest(
                "hold-2-d", model, resumed, stop=StopParams(max_tokens=5, ignore_eos=True),
                annotations={KV_TRANSFER: {**transfer, "worker": prefill.id}},
            )  # fmt: skip
            answer = plane.collect(decode.id, late)
            assert sum(len(o.token_ids) for o in answer) == 5
            assert decode.metric("rotor_engine_kv_fetch_failures_total") == 2
            assert decode.metric("rotor_engine_kv_fetched_blocks_total") == 0
    finally:
        prefill.proc.stop()
        decode.proc.stop()


# -- faults -----------------------------------------------------------------------------------


@pytest.fixture
def slow_pair(nats: Nats, request: pytest.FixtureRequest) -> Iterator[tuple[str, Worker, Worker]]:
    """A model of the test's own, whose prefill worker takes seconds per prompt."""
    model = request.node.name.replace("_", "-")[:40]
    prefill = start_worker(nats, *SLOW_PREFILL, *PREFILL, "--model-name", model, system=True)
    decode = start_worker(nats, *SLOW, *DECODE, "--model-name", model, system=True)
    try:
        yield model, prefill, decode
    finally:
        prefill.proc.stop()
        decode.proc.stop()


def in_background(fn: Any) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    return thread, result


def test_a_busy_prefill_worker_is_passed_by_and_a_killed_one_is_fallen_back_from(
    nats: Nats, slow_pair: tuple[str, Worker, Worker]
) -> None:
    model, prefill, decode = slow_pair
    frontend = start_frontend(nats, "--disagg-policy", "load", "--prefill-busy-threshold", "1")
    try:
        frontend.wait_workers(model, {prefill.id, decode.id})
        body = chat(long_system("rivers"), model=model, mock={"output": STORY}, max_tokens=500)
        first, result = in_background(lambda: stream(frontend, body))
        wait_for("the prefill to run", lambda: prefill.metric("rotor_engine_active_requests") == 1)
        # the prefill worker's queue is past the threshold: the next one is local
        r = post(frontend, chat("Be brief.", model=model, mock={"output": "short"}))
        assert r.headers["x-rotor-worker"] == decode.id
        assert r.json()["choices"][0]["message"]["content"] == "short"
        assert decisions(frontend, "local", "busy") == 1
        prefill.proc.kill()  # mid-prefill: the first request is prefilled on its decode worker
        first.join(90)
        text, usage, header = result[0]
        assert header == decode.id  # the answer's first token came from its decode worker
        assert text == STORY  # nothing lost, nothing repeated
        assert decisions(frontend, "local", "prefill_failed") == 1
        assert decisions(frontend, "remote", "idle") == 0  # the failed one was not counted twice
    finally:
        frontend.proc.stop()


@contextmanager
def raw_request(frontend: Frontend, body: str) -> Iterator[None]:
    """A chat request on a raw connection, closed when the block ends (the
    client that leaves before any answer: headers come with the first token)."""
    host, port = frontend.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            f"{body}".encode()
        )
        yield


def test_a_client_that_leaves_mid_prefill_stops_both_workers(
    nats: Nats, slow_pair: tuple[str, Worker, Worker]
) -> None:
    model, prefill, decode = slow_pair
    frontend = start_frontend(nats, "--disagg-policy", "always")
    try:
        frontend.wait_workers(model, {prefill.id, decode.id})
        # headers come with the first token, so the client that leaves
        # mid-prefill is a raw connection, closed before any answer
        body = json.dumps(chat(long_system("owls"), model=model, stream=True, max_tokens=500))
        with raw_request(frontend, body):
            wait_for(
                "the prefill to run", lambda: prefill.metric("rotor_engine_active_requests") == 1
            )
        # the connection is closed: the prefill stops (before its first token),
        # nothing is pinned, nothing decodes
        wait_for("the prefill to stop", lambda: prefill.metric("rotor_engine_active_requests") == 0)
        assert prefill.metric("rotor_engine_generated_tokens_total") == 0
        assert prefill.metric("rotor_engine_kv_blocks_pinned") == 0
        assert decode.metric("rotor_engine_active_requests") == 0
        assert decode.metric("rotor_engine_generated_tokens_total") == 0
        # and the pair serves the next request whole
        r = post(frontend, chat("Be brief.", model=model, mock={"output": "next"}))
        assert r.json()["choices"][0]["message"]["content"] == "next"
        wait_for("the pins freed", lambda: prefill.metric("rotor_engine_kv_blocks_pinned") == 0)
    finally:
        frontend.proc.stop()


@pytest.fixture
def slow_transfer(
    nats: Nats, request: pytest.FixtureRequest
) -> Iterator[tuple[str, Worker, Worker]]:
    """A model of the test's own whose decode worker takes seconds to fetch
    a prompt's blocks (a 25 MB/s link: ~2 s for a few hundred tokens)."""
    model = request.node.name.replace("_", "-")[:40]
    prefill = start_worker(nats, *FAST, *PREFILL, "--model-name", model, system=True)
    decode = start_worker(
        nats, *SLOW, *DECODE, "--model-name", model, "--kv-transfer-bandwidth", "0.025",
        "--kv-bytes-per-token", "131072", system=True,
    )  # fmt: skip
    try:
        yield model, prefill, decode
    finally:
        prefill.proc.stop()
        decode.proc.stop()


def test_the_first_token_comes_once_the_blocks_have_moved(
    nats: Nats, slow_transfer: tuple[str, Worker, Worker]
) -> None:
    """The handover is part of the time to the first token, never a gap
    between two tokens: the prefill's first token is held until its decode
    worker, having fetched the blocks, answers."""
    model, prefill, decode = slow_transfer
    frontend = start_frontend(nats, "--disagg-policy", "always")
    try:
        frontend.wait_workers(model, {prefill.id, decode.id})
        fetched_when_first: list[float] = []

        def on_text(text: str) -> None:
            if text and not fetched_when_first:
                fetched_when_first.append(decode.metric("rotor_engine_kv_fetched_blocks_total"))

        body = chat(long_system("lakes"), model=model, mock={"output": STORY}, max_tokens=500)
        text, usage, header = stream(frontend, body, on_text)
        assert header == f"prefill={prefill.id}, decode={decode.id}"
        assert text == STORY
        assert fetched_when_first[0] >= usage["prompt_tokens"] // BLOCK - 1
    finally:
        frontend.proc.stop()


def test_a_client_that_leaves_mid_transfer_stops_both_workers(
    nats: Nats, slow_transfer: tuple[str, Worker, Worker]
) -> None:
    model, prefill, decode = slow_transfer
    frontend = start_frontend(nats, "--disagg-policy", "always")
    try:
        frontend.wait_workers(model, {prefill.id, decode.id})
        body = json.dumps(chat(long_system("foxes"), model=model, stream=True, max_tokens=500))
        with raw_request(frontend, body):
            wait_for(
                "the decode worker to fetch",
                lambda: decode.metric("rotor_engine_active_requests") == 1,
            )
            assert prefill.metric("rotor_engine_active_requests") == 0  # its part is done
        # the client left mid-transfer: the decode stops, having generated nothing,
        # and nothing stays pinned on the prefill worker
        wait_for("the decode to stop", lambda: decode.metric("rotor_engine_active_requests") == 0)
        assert decode.metric("rotor_engine_generated_tokens_total") == 0
        wait_for("the pins freed", lambda: prefill.metric("rotor_engine_kv_blocks_pinned") == 0)
        r = post(frontend, chat("Be brief.", model=model, mock={"output": "next"}))
        assert r.json()["choices"][0]["message"]["content"] == "next"
    finally:
        frontend.proc.stop()


def test_a_prefill_worker_that_refuses_is_fallen_back_from(nats: Nats) -> None:
    """A prefill worker whose context is shorter than the prompt refuses it:
    the decode worker prefills it; enforced, the client is told why."""
    model = "refusing-model"
    decode = start_worker(nats, *FAST, *DECODE, "--model-name", model)
    loose = start_frontend(nats, "--disagg-policy", "always")
    enforcing = start_frontend(nats, "--enforce-disagg")
    prefill: Worker | None = None
    try:
        # the frontends take their card from the first worker (the decode
        # one's, with the longer context), then see the prefill worker join
        loose.wait_workers(model, {decode.id})
        enforcing.wait_workers(model, {decode.id})
        prefill = start_worker(
            nats, *FAST, *PREFILL, "--model-name", model, "--max-model-len", "128"
        )
        loose.wait_workers(model, {decode.id, prefill.id})
        enforcing.wait_workers(model, {decode.id, prefill.id})
        body = chat(long_system("hills"), model=model, mock={"output": STORY}, max_tokens=500)
        text, usage, header = stream(loose, body)
        assert header == decode.id and text == STORY and usage["prompt_tokens"] > 128
        assert decisions(loose, "local", "prefill_failed") == 1
        refused = httpx.post(enforcing.v1 + "/chat/completions", json=body, timeout=30)
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"]
        message = refused.json()["error"]["message"]
        assert f"the prefill on worker {prefill.id} failed" in message
        assert "--enforce-disagg" in message
    finally:
        for proc in (loose.proc, enforcing.proc, decode.proc, *([prefill.proc] if prefill else [])):
            proc.stop()


def test_a_decode_worker_killed_after_the_transfer_is_migrated_from(
    nats: Nats, always: Frontend, request: pytest.FixtureRequest
) -> None:
    model = "migrate-model"
    prefill = start_worker(nats, *FAST, *PREFILL, "--model-name", model)
    decoders = {
        w.id: w for w in (start_worker(nats, *SLOW, *DECODE, "--model-name", model) for _ in "ab")
    }
    try:
        always.wait_workers(model, {prefill.id, *decoders})
        killed: list[str] = []
        header: list[str] = []

        def kill_once(text: str) -> None:
            if not killed and len(text) > 60:
                victim = header[0].rpartition("decode=")[2]
                decoders[victim].proc.kill()
                killed.append(victim)

        body = chat("Be brief.", model=model, mock={"output": STORY}, max_tokens=500)
        streamed = {**body, "stream": True}
        with httpx.stream("POST", always.v1 + "/chat/completions", json=streamed, timeout=60) as r:
            header.append(r.headers["x-rotor-worker"])
            text = []
            for chunk in live_chunks(r):
                text.extend(c["delta"].get("content") or "" for c in chunk["choices"])
                kill_once("".join(text))
        assert killed, "the stream ended before the kill"
        assert "".join(text) == STORY
    finally:
        prefill.proc.stop()
        for w in decoders.values():
            w.proc.stop()


def test_no_prefill_worker_falls_back_and_enforce_says_503(nats: Nats, always: Frontend) -> None:
    model = "decode-only-model"
    decode = start_worker(nats, *FAST, *DECODE, "--model-name", model)
    enforcing = start_frontend(nats, "--enforce-disagg")
    try:
        always.wait_workers(model, {decode.id})
        enforcing.wait_workers(model, {decode.id})
        before = decisions(always, "local", "no_prefill_worker")
        r = post(always, chat("Be brief.", model=model, mock={"output": "local"}))
        assert r.headers["x-rotor-worker"] == decode.id
        assert r.json()["choices"][0]["message"]["content"] == "local"
        assert decisions(always, "local", "no_prefill_worker") - before == 1
        refused = httpx.post(
            enforcing.v1 + "/chat/completions", json=chat("Be brief.", model=model), timeout=30
        )
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"]
        assert "prefill worker" in refused.json()["error"]["message"]
        assert "--enforce-disagg" in refused.json()["error"]["message"]
    finally:
        enforcing.proc.stop()
        decode.proc.stop()
