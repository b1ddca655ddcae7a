"""Scale out, for real: a nats-server, `rotor worker` and `rotor frontend`
processes, the official openai SDK, and faults made with real signals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from support.cluster import (
    Frontend,
    Nats,
    Worker,
    nats_server,
    start_frontend,
    start_worker,
    wait_for,
)
from support.server import rotor_server

pytestmark = pytest.mark.e2e

SLOW = ("out=mocker", "--speedup-ratio", "1")  # 10 ms per decode step
ASK = [{"role": "user", "content": "Tell me a story"}]
STORY = " ".join(f"word{i}" for i in range(120))


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


@pytest.fixture(scope="module")
def pool(nats: Nats) -> Iterator[tuple[Frontend, list[Worker]]]:
    """The shared pool: two mocker workers of `mock-model` behind a frontend,
    the second with its system port on another loopback address."""
    hosts = ("127.0.0.1", "127.0.0.2")
    workers = [start_worker(nats, *SLOW, system=True, system_host=h) for h in hosts]
    frontend = start_frontend(nats)
    try:
        frontend.wait_workers("mock-model", {w.id for w in workers})
        yield frontend, workers
    finally:
        frontend.proc.stop()
        for w in workers:
            w.proc.stop()


def stream_text(
    frontend: Frontend, body: dict[str, Any], on_chunk: Any = None
) -> tuple[str, str | None, dict[str, Any], str]:
    """(text, finish_reason, usage, worker) of one streamed chat request."""
    text: list[str] = []
    finish = None
    usage: dict[str, Any] = {}
    body = {"messages": ASK, "stream": True, "stream_options": {"include_usage": True}, **body}
    with httpx.stream("POST", frontend.v1 + "/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        worker = r.headers["x-rotor-worker"]
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            for c in chunk["choices"]:
                text.append(c["delta"].get("content") or "")
                finish = c.get("finish_reason") or finish
            usage = chunk.get("usage") or usage
            if on_chunk is not None:
                on_chunk(worker, "".join(text))
    return "".join(text), finish, usage, worker


def has_text(line: str) -> bool:
    """An SSE line of a chunk that carries generated text."""
    return '"content":"' in line and '"content":""' not in line


# -- discovery and answers -----------------------------------------------------------------


def test_workers_register_and_the_model_is_listed(pool: tuple[Frontend, list[Worker]]) -> None:
    frontend, workers = pool
    models = frontend.openai().models.list()
    assert [m.id for m in models.data] == ["mock-model"]
    health = httpx.get(frontend.url + "/health").json()
    assert {w["id"] for w in health["workers"]["mock-model"]} == {w.id for w in workers}


def test_a_worker_s_system_port_answers_on_its_host(pool: tuple[Frontend, list[Worker]]) -> None:
    _, workers = pool
    for worker in workers:
        assert worker.system_url is not None
        assert httpx.get(worker.system_url + "/live", timeout=5).json() == {"status": "live"}
        health = httpx.get(worker.system_url + "/health", timeout=5)
        assert health.status_code == 200 and health.json()["worker"] == worker.id
    elsewhere = workers[1].system_url.replace("127.0.0.2", "127.0.0.1")  # type: ignore[union-attr]
    with pytest.raises(httpx.ConnectError):
        httpx.get(elsewhere + "/live", timeout=5)


def test_answers_are_those_of_rotor_run(pool: tuple[Frontend, list[Worker]]) -> None:
    frontend, _ = pool
    mock = {"output": "The answer is <b>42</b>, said the mocker.", "tokens_per_step": 3}
    with rotor_server(*SLOW) as single:
        for client in (frontend.openai(), single.openai()):
            assert client.models.list().data[0].id == "mock-model"
        bodies = []
        for server in (frontend, single):
            reply = server.openai().chat.completions.create(
                model="mock-model", messages=ASK, extra_body={"mock": mock}
            )
            bodies.append((reply.choices[0].message.content, reply.choices[0].finish_reason))
            streamed = server.openai().chat.completions.create(
                model="mock-model", messages=ASK, stream=True, extra_body={"mock": mock}
            )
            text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
            bodies.append((text, "stop"))
        assert bodies[0] == bodies[1] == bodies[2] == bodies[3]
        assert bodies[0] == (mock["output"], "stop")


def test_token_ids_cross_nats_as_the_engine_made_them(pool: tuple[Frontend, list[Worker]]) -> None:
    """`return_token_ids` through a worker: each choice's ids (reasoning
    tags and all), the prompt's, streamed chunk by chunk as whole."""
    frontend, _ = pool
    outputs = ["<think>short</think>Yes.", "No, never."]
    body = {
        "model": "mock-model",
        "messages": ASK,
        "n": 2,
        "return_token_ids": True,
        "mock": {"output": outputs, "tokens_per_step": 2},
    }
    (eos,) = frontend.tokenize("<|im_end|>")
    expected = [[*frontend.tokenize(o), eos] for o in outputs]
    whole = httpx.post(frontend.v1 + "/chat/completions", json=body, timeout=60).json()
    assert [c["token_ids"] for c in whole["choices"]] == expected
    assert whole["choices"][0]["message"]["reasoning_content"] == "short"
    assert whole["prompt_token_ids"] == frontend.tokenize(messages=ASK)
    streamed: dict[int, list[int]] = {0: [], 1: []}
    prompts = []
    with httpx.stream(
        "POST", frontend.v1 + "/chat/completions", json={**body, "stream": True}, timeout=60
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                (c,) = chunk["choices"]
                streamed[c["index"]] += c.get("token_ids", [])
                if "prompt_token_ids" in chunk:
                    prompts.append(chunk["prompt_token_ids"])
    assert [streamed[0], streamed[1]] == expected
    assert prompts == [whole["prompt_token_ids"]] * 2


def test_round_robin_spreads_over_the_workers(pool: tuple[Frontend, list[Worker]]) -> None:
    frontend, workers = pool
    seen = []
    for _ in range(4):
        r = httpx.post(
            frontend.v1 + "/chat/completions",
            json={"messages": ASK, "max_tokens": 3},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        seen.append(r.headers["x-rotor-worker"])
    assert set(seen) == {w.id for w in workers}
    assert seen[0] != seen[1] and seen[0] == seen[2]


def test_a_second_frontend_serves_the_same_workers(
    nats: Nats, pool: tuple[Frontend, list[Worker]]
) -> None:
    _, workers = pool
    second = start_frontend(nats)
    try:
        second.wait_workers("mock-model", {w.id for w in workers})
        reply = second.openai().chat.completions.create(
            model="mock-model", messages=ASK, extra_body={"mock": {"output": "two frontends"}}
        )
        assert reply.choices[0].message.content == "two frontends"
    finally:
        second.proc.stop()


def test_refusals_from_a_worker_are_400s_naming_the_field(
    pool: tuple[Frontend, list[Worker]],
) -> None:
    frontend, _ = pool
    with pytest.raises(openai.BadRequestError) as e:
        frontend.openai().chat.completions.create(
            model="mock-model", messages=ASK, extra_body={"mock": {"output": 42}}
        )
    assert e.value.body["param"] == "mock"


def test_a_priority_to_workers_that_schedule_fcfs_is_a_400_naming_the_flag(
    pool: tuple[Frontend, list[Worker]],
) -> None:
    """The frontend reads the policy off the workers' card (the pool's are
    fcfs); priority 0, every request's default, passes as vLLM's does."""
    frontend, _ = pool
    client = frontend.openai()
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="mock-model", messages=ASK, max_tokens=2, extra_body={"priority": 5}
        )
    assert e.value.body["param"] == "priority"
    assert "--scheduling-policy priority" in e.value.body["message"]
    ok = client.chat.completions.create(  # ignore_eos: the mocker's EOS is random
        model="mock-model",
        messages=ASK,
        max_tokens=2,
        extra_body={"priority": 0, "ignore_eos": True},
    )
    assert ok.choices[0].finish_reason == "length"


def test_a_client_that_leaves_stops_the_work_on_the_worker(
    pool: tuple[Frontend, list[Worker]],
) -> None:
    frontend, workers = pool
    by_id = {w.id: w for w in workers}
    body = {
        "messages": ASK,
        "stream": True,
        "max_tokens": 2000,
        "mock": {"output": STORY * 5},
    }
    with httpx.stream("POST", frontend.v1 + "/chat/completions", json=body, timeout=60) as r:
        worker = by_id[r.headers["x-rotor-worker"]]
        for line in r.iter_lines():
            if has_text(line):
                assert worker.metric("rotor_engine_active_requests") == 1
                break  # leaving the line iterator closes the connection
    wait_for("the worker to stop", lambda: worker.metric("rotor_engine_active_requests") == 0)
    generated = worker.metric("rotor_engine_generated_tokens_total")
    # A request this worker answered afterwards: it ran, and made that
    # request's tokens alone (a 10 ms step each: the story would have gone on)
    probe = {"messages": ASK, "mock": {"output": " ".join(["probe"] * 8)}}
    answered: list[int] = []

    def answered_by_the_worker() -> bool:
        r = httpx.post(frontend.v1 + "/chat/completions", json=probe, timeout=30)
        assert r.status_code == 200, r.text
        if r.headers["x-rotor-worker"] == worker.id:
            answered.append(r.json()["usage"]["completion_tokens"])
        return bool(answered)

    wait_for("a request answered by the same worker", answered_by_the_worker)
    assert answered[0] > 30
    assert worker.metric("rotor_engine_generated_tokens_total") == generated + answered[0]


# -- faults ---------------------------------------------------------------------------------


@contextmanager
def two_workers(nats: Nats, frontend: Frontend, model: str) -> Iterator[dict[str, Worker]]:
    """Two slow mocker workers of `model`, live in `frontend`, stopped after."""
    workers = {
        w.id: w
        for w in (start_worker(nats, *SLOW, "--model-name", model, system=True) for _ in range(2))
    }
    try:
        frontend.wait_workers(model, set(workers))
        yield workers
    finally:
        for w in workers.values():
            w.proc.stop()


@pytest.fixture
def fault_pool(nats: Nats, request: pytest.FixtureRequest) -> Iterator[tuple[Frontend, str]]:
    """A model of the test's own (its workers get killed), and a frontend."""
    model = request.node.name.replace("_", "-")[:40]
    frontend = start_frontend(nats)
    try:
        yield frontend, model
    finally:
        frontend.proc.stop()


def test_a_worker_killed_mid_stream_hands_over_without_a_seam(
    nats: Nats, fault_pool: tuple[Frontend, str]
) -> None:
    frontend, model = fault_pool
    with two_workers(nats, frontend, model) as workers:
        killed: list[str] = []

        def kill_once(worker: str, text: str) -> None:
            if not killed and len(text) > 60:
                workers[worker].proc.kill()
                killed.append(worker)

        body = {"model": model, "max_tokens": 2000, "mock": {"output": STORY}}
        text, finish, usage, _ = stream_text(frontend, body, kill_once)
        assert killed, "the stream ended before the kill"
        assert text == STORY  # nothing repeated, nothing missing
        assert finish == "stop"
        with rotor_server(*SLOW, "--model-name", model) as single:
            alone = single.openai().chat.completions.create(
                model=model, messages=ASK, extra_body={"mock": {"output": STORY}}
            )
        assert usage["completion_tokens"] == alone.usage.completion_tokens  # the whole answer
        assert frontend.metric("rotor_router_migrations_total") == 1


def test_a_constrained_request_is_not_moved_and_says_why(
    nats: Nats, fault_pool: tuple[Frontend, str]
) -> None:
    frontend, model = fault_pool
    with two_workers(nats, frontend, model) as workers:
        body = {
            "model": model,
            "messages": ASK,
            "stream": True,
            "max_tokens": 2000,
            "guided_regex": "(word[0-9]+ )+",
            "mock": {"output": STORY},
        }
        error = None
        with httpx.stream("POST", frontend.v1 + "/chat/completions", json=body, timeout=60) as r:
            worker = r.headers["x-rotor-worker"]
            killed = False
            for line in r.iter_lines():
                if not killed and has_text(line):
                    workers[worker].proc.kill()
                    killed = True
                if line.startswith("data: {") and '"error"' in line:
                    error = json.loads(line[6:])["error"]
        assert error is not None and error["code"] == 503
        assert "constraint cannot resume" in error["message"]


def test_no_live_worker_is_a_503_until_one_comes_back(
    nats: Nats, fault_pool: tuple[Frontend, str]
) -> None:
    frontend, model = fault_pool
    first = start_worker(nats, *SLOW, "--model-name", model)
    frontend.wait_workers(model, {first.id})
    first.proc.kill()
    frontend.wait_workers(model, set(), timeout=15)  # its lease ran out
    assert model not in [m.id for m in frontend.openai().models.list().data]
    r = httpx.post(
        frontend.v1 + "/chat/completions", json={"model": model, "messages": ASK}, timeout=10
    )
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"]
    assert model in r.json()["error"]["message"]
    assert httpx.get(frontend.url + "/health").status_code == 503
    again = start_worker(nats, *SLOW, "--model-name", model)
    try:
        frontend.wait_workers(model, {again.id})
        reply = frontend.openai().chat.completions.create(
            model=model, messages=ASK, extra_body={"mock": {"output": "back"}}
        )
        assert reply.choices[0].message.content == "back"
        assert frontend.metric("rotor_router_no_worker_total") == 1
    finally:
        again.proc.stop()
        first.proc.stop()


def test_sigterm_drains_a_worker(nats: Nats, fault_pool: tuple[Frontend, str]) -> None:
    frontend, model = fault_pool
    with two_workers(nats, frontend, model) as workers:
        leaving: list[str] = []

        def terminate_once(worker: str, text: str) -> None:
            if not leaving and text:
                workers[worker].proc.terminate()
                leaving.append(worker)
                frontend.wait_workers(model, set(workers) - {worker}, timeout=10)
                # draining: not ready any more, still live
                url = workers[worker].system_url
                assert httpx.get(f"{url}/health", timeout=5).status_code == 503
                assert httpx.get(f"{url}/live", timeout=5).status_code == 200

        body = {"model": model, "max_tokens": 2000, "mock": {"output": STORY}}
        text, finish, _, served_by = stream_text(frontend, body, terminate_once)
        assert text == STORY and finish == "stop"  # it finished its request
        assert frontend.metric("rotor_router_migrations_total") == 0  # on its own
        assert workers[served_by].proc.process.wait(15) == 0
        (other,) = set(workers) - {served_by}
        r = httpx.post(
            frontend.v1 + "/chat/completions",
            json={"model": model, "messages": ASK, "max_tokens": 3},
            timeout=10,
        )
        assert r.headers["x-rotor-worker"] == other


def test_a_worker_whose_card_disagrees_is_refused(
    nats: Nats, pool: tuple[Frontend, list[Worker]], tmp_path: Path
) -> None:
    template = tmp_path / "other.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(RuntimeError, match="different tokenizer or chat template"):
        start_worker(nats, *SLOW, "--chat-template", str(template))


def test_nats_restarts_and_everyone_comes_back() -> None:
    with nats_server() as nats:
        worker = start_worker(nats, *SLOW)
        frontend = start_frontend(nats)
        try:
            frontend.wait_workers("mock-model", {worker.id})
            nats.restart()

            def serves() -> bool:
                try:
                    r = httpx.post(
                        frontend.v1 + "/chat/completions",
                        json={"messages": ASK, "mock": {"output": "again"}},
                        timeout=10,
                    )
                except httpx.HTTPError:
                    return False
                return (
                    r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "again"
                )

            wait_for("the cluster to serve again", serves, timeout=30)
        finally:
            frontend.proc.stop()
            worker.proc.stop()
