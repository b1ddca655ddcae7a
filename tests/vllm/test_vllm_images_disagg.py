"""Disaggregated serving of a vision-language model over real vLLM on CPU,
all real processes: a nats-server, a prefill and a decode `rotor worker
out=vllm` serving the tiny random Idefics3 (support/vllm_vlm.py), and two
frontends. A chat request with an image, prefilled on the prefill worker and
decoded on the decode worker (which loads the prompt's KV through rotor's
storage connector, and gets the image's bytes too: vLLM expands the
placeholder itself, Capabilities.images_at_decode), answers greedily as
the aggregated request does, token for token, with the same prompt tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Frontend, Worker, nats_server, start_frontend, start_worker
from support.vllm_setup import START_TIMEOUT, VLLM_ARGS, VLLM_ENV
from support.vllm_vlm import data_url, png

NAME = "tiny-vlm"
ANSWER = 8
QUESTION = "Describe the picture, then tell me a long story about it. " * 3


def chat(frontend: Frontend, image: bytes) -> dict[str, Any]:
    body = {
        "model": NAME,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": data_url(image)}},
                    {"type": "text", "text": QUESTION},
                ],
            }
        ],
        "temperature": 0,
        "max_tokens": ANSWER,
    }
    r = httpx.post(frontend.v1 + "/chat/completions", json=body, timeout=180)
    assert r.status_code == 200, r.text
    answer = r.json()
    return {
        "text": answer["choices"][0]["message"]["content"],
        "usage": answer["usage"],
        "worker": r.headers["x-rotor-worker"],
    }


@pytest.fixture(scope="module")
def pd(
    vlm_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Worker, Worker, Frontend, Frontend]]:
    store = tmp_path_factory.mktemp("vlm-kv")
    engine_words = [
        "--",
        *VLLM_ARGS,
        "--kv-transfer-config",
        json.dumps({"kv_connector_extra_config": {"shared_storage_path": str(store)}}),
    ]
    with nats_server() as nats:
        procs: list[Any] = []
        try:
            workers = []
            for mode in ("prefill", "decode"):
                worker = start_worker(
                    nats, "out=vllm", "--model-path", str(vlm_dir), "--model-name", NAME,
                    "--disaggregation-mode", mode, *engine_words,
                    env=VLLM_ENV, timeout=START_TIMEOUT, system=True,
                )  # fmt: skip
                procs.append(worker.proc)
                workers.append(worker)
            prefill, decode = workers
            always = start_frontend(nats, "--disagg-policy", "always", "--router", "kv")
            procs.append(always.proc)
            local = start_frontend(nats, "--disagg-policy", "isl", "--disagg-min-tokens", "100000")
            procs.append(local.proc)
            for frontend in (always, local):
                frontend.wait_workers(NAME, {prefill.id, decode.id})
            yield prefill, decode, always, local
        finally:
            for proc in reversed(procs):
                proc.stop()


def test_an_image_prefilled_remotely_answers_as_the_aggregated_request(
    pd: tuple[Worker, Worker, Frontend, Frontend],
) -> None:
    prefill, decode, always, local = pd
    image = png(5)
    fetched = decode.metric("rotor_engine_kv_fetched_blocks_total")
    remote = chat(always, image)
    # the decode worker continued it, with the prompt's KV loaded from the prefill's
    assert remote["worker"] == f"prefill={prefill.id}, decode={decode.id}"
    assert decode.metric("rotor_engine_kv_fetched_blocks_total") > fetched
    aggregated = chat(local, image)  # prefilled where it decodes: one engine
    assert aggregated["worker"] == decode.id
    assert remote["text"] == aggregated["text"]
    assert remote["usage"]["prompt_tokens"] == aggregated["usage"]["prompt_tokens"]
    assert remote["usage"]["completion_tokens"] == aggregated["usage"]["completion_tokens"]
    # another image is another answer: the image reached both sides
    assert chat(always, png(6))["text"] != remote["text"]
