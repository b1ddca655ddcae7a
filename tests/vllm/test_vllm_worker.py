"""`rotor worker out=vllm` behind `rotor frontend --router kv`: the same vLLM
engine as `rotor run out=vllm`, registered on a real nats-server, its KV
events relayed so the kv router sees what vLLM caches; with a LoRA adapter
(`--lora`) that frontends serve as a model, its KV blocks hashed apart from
the base model's."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from support.cluster import Frontend, nats_server, start_frontend, start_worker, wait_for
from support.llama import add_llama_weights
from support.models import chatml_model
from support.vllm_lora import tiny_lora
from support.vllm_setup import START_TIMEOUT, VLLM_ARGS, VLLM_ENV

CONTEXT = 2048
LONG = "Tell me everything about the history of Paris. " * 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Frontend, str]]:
    model = add_llama_weights(chatml_model(tmp_path_factory.mktemp("vllm-w"), "tiny"), CONTEXT)
    adapter = tiny_lora(tmp_path_factory.mktemp("vllm-w-lora") / "sql", model)
    with nats_server() as nats:
        worker = start_worker(
            nats,
            "out=vllm",
            "--model-path",
            str(model),
            "--lora",
            f"sql={adapter}",
            "--",
            *VLLM_ARGS,
            env=VLLM_ENV,
            timeout=START_TIMEOUT,
        )
        frontend = start_frontend(nats, "--router", "kv")
        try:
            frontend.wait_workers("tiny", {worker.id})
            yield frontend, worker.id
        finally:
            frontend.proc.stop()
            worker.proc.stop()


def ask(frontend: Frontend, content: str, model: str = "tiny") -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": 8,
    }
    r = httpx.post(frontend.v1 + "/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r


def indexed(frontend: Frontend, worker: str) -> int:
    body = httpx.get(frontend.url + "/health", timeout=5).json()
    return next(w["kv_blocks_indexed"] for w in body["workers"]["tiny"] if w["id"] == worker)


def test_a_vllm_worker_serves_and_its_kv_events_reach_the_router(
    cluster: tuple[Frontend, str],
) -> None:
    frontend, worker = cluster
    first = ask(frontend, LONG)
    assert first.headers["x-rotor-worker"] == worker
    wait_for("vLLM's blocks in the frontend's index", lambda: indexed(frontend, worker) > 0, 30)
    second = ask(frontend, LONG)
    assert second.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    overlap = int(second.headers["x-rotor-kv-overlap"])
    cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert overlap > 0 and cached >= (overlap - 1) * 32  # what the index said vLLM held


def test_a_vllm_worker_s_adapter_is_served_and_its_blocks_hash_apart(
    cluster: tuple[Frontend, str],
) -> None:
    """The frontend serves the worker's adapter as a model; a prompt vLLM
    cached for the base model is no overlap for the adapter (vLLM computes
    it again), and once cached under the adapter it is one there."""
    frontend, worker = cluster
    models = {m["id"]: m for m in httpx.get(frontend.v1 + "/models", timeout=5).json()["data"]}
    assert models["sql"]["parent"] == "tiny"
    prompt = "Tell me everything about the history of Rome. " * 20
    base = ask(frontend, prompt)
    wait_for(
        "the base prompt's blocks",
        lambda: int(ask(frontend, prompt).headers["x-rotor-kv-overlap"]) > 0,
        30,
    )
    first = ask(frontend, prompt, "sql")
    assert first.json()["model"] == "sql" and first.headers["x-rotor-worker"] == worker
    assert int(first.headers["x-rotor-kv-overlap"]) == 0
    assert first.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # vLLM agrees
    assert first.json()["choices"][0]["message"] != base.json()["choices"][0]["message"]

    def adapter_cached() -> bool:
        return int(ask(frontend, prompt, "sql").headers["x-rotor-kv-overlap"]) > 0

    wait_for("the adapter's blocks", adapter_cached, 30)
