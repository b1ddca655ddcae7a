"""`--served-model-name A B`: one model under several names, in `rotor run`
and through a worker's card over NATS. A request may use any name and its
response says that name back; `/v1/models` lists each with the canonical
one as `root`; metrics count them all under the canonical name."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import openai
import pytest

from support.cluster import nats_server, start_frontend, start_worker
from support.server import Server, rotor_server

NAMES = ("mock-model", "assistant", "gpt-4o-mini")
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0", "--served-model-name", *NAMES) as srv:
        yield srv


@pytest.mark.parametrize("name", NAMES)
def test_any_name_serves_and_the_response_says_the_name_used(server: Server, name: str) -> None:
    client = server.openai()
    chat = client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=5)
    assert chat.model == name
    assert chat.choices[0].finish_reason in ("stop", "length")
    chunks = list(
        client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=5, stream=True)
    )
    assert chunks and {c.model for c in chunks} == {name}
    completion = client.completions.create(model=name, prompt="hello", max_tokens=3)
    assert completion.model == name
    message = server.anthropic().messages.create(model=name, max_tokens=5, messages=MESSAGES)
    assert message.model == name


def test_models_lists_every_name_with_the_canonical_one_as_root(server: Server) -> None:
    listed = server.openai().models.list().data
    assert [m.id for m in listed] == list(NAMES)
    assert {m.model_extra["root"] for m in listed} == {"mock-model"}
    one = httpx.get(server.v1 + "/models/assistant", timeout=5).json()
    assert one["id"] == "assistant" and one["root"] == "mock-model"
    anthropic_ids = [m.id for m in server.anthropic().models.list().data]
    assert anthropic_ids == list(NAMES)
    missing = httpx.get(server.v1 + "/models/assistant2", timeout=5)
    assert missing.status_code == 404 and "assistant2" in missing.text


def test_metrics_count_an_alias_under_the_model(server: Server) -> None:
    before = server.metric("rotor_requests_total", 'model="mock-model"')
    server.openai().chat.completions.create(model="assistant", messages=MESSAGES, max_tokens=2)
    assert server.metric("rotor_requests_total", 'model="mock-model"') == before + 1
    assert server.metric("rotor_requests_total", 'model="assistant"') == 0


def test_an_unknown_name_is_a_404_that_lists_the_names(server: Server) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        server.openai().chat.completions.create(model="nope", messages=MESSAGES, max_tokens=2)
    assert "nope" in str(caught.value) and "assistant" in str(caught.value)


def test_a_worker_s_names_reach_the_frontend() -> None:
    with nats_server() as nats:
        worker = start_worker(nats, "out=mocker", "--served-model-name", "mock-model", "assistant")
        frontend = start_frontend(nats)
        try:
            frontend.wait_workers("mock-model", {worker.id})
            client = openai.OpenAI(base_url=frontend.v1, api_key="x", max_retries=0)
            assert [m.id for m in client.models.list().data] == ["mock-model", "assistant"]
            chat = client.chat.completions.create(
                model="assistant", messages=MESSAGES, max_tokens=3
            )
            assert chat.model == "assistant"
            # the alias finds the model's pool: the response names the worker that served it
            raw = httpx.post(
                frontend.v1 + "/chat/completions",
                json={"model": "assistant", "messages": MESSAGES, "max_tokens": 2},
                timeout=10,
            )
            assert raw.status_code == 200 and raw.headers["x-rotor-worker"] == worker.id
        finally:
            frontend.proc.stop()
            worker.proc.stop()


def test_two_canonical_names_stop_startup() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rotor.cli", "run", "--model-name", "a",
         "--served-model-name", "b", "c", "--port", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "--model-name 'a' and --served-model-name 'b'" in done.stderr + done.stdout
