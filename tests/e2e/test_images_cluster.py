"""Images over NATS: real `rotor frontend` and `rotor worker` processes (the
mocker serving a Qwen2-VL-shaped model) on a real nats-server. An image far
over NATS's 1 MiB message reaches the worker whole; `--router kv` sends a
repeated image to the worker that holds it and counts a different one as a
miss from its first image block; disaggregated, the prefill worker gets the
image's bytes and the decode worker only its hash (it fetches the KV). The
mocker's `{images}` says what each engine request carried."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from support.cluster import Frontend, Nats, Worker, nats_server, start_frontend, start_worker
from support.vlm import write_qwen2_vl_dir

pytestmark = pytest.mark.e2e

AGG = "vlm"
PD = "vlm-pd"
FAST = ("out=mocker", "--speedup-ratio", "0")
BLOCK = 16  # the mocker's block size
TEXT = "Describe the picture in a few words, please."


def png(width: int, height: int, seed: int, level: int = 6) -> bytes:
    rng = random.Random(seed)
    image = Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3))
    buf = io.BytesIO()
    image.save(buf, "PNG", compress_level=level)
    return buf.getvalue()


def body(model: str, *images: bytes, max_tokens: int = 4000) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(i).decode()},
        }
        for i in images
    ]
    return {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": TEXT}]}],
        "mock": {"output": "{images}"},
    }


def post(frontend: Frontend, data: dict[str, Any]) -> httpx.Response:
    r = httpx.post(frontend.v1 + "/chat/completions", json=data, timeout=60)
    assert r.status_code == 200, r.text
    return r


def seen(r: httpx.Response) -> list[dict[str, Any]]:
    found = json.loads(r.json()["choices"][0]["message"]["content"])
    assert isinstance(found, list)
    return found


def cached(r: httpx.Response) -> int:
    details = r.json()["usage"].get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vlm") / "qwen2-vl"
    write_qwen2_vl_dir(path, max_pixels=448 * 448)  # up to 256 image tokens
    return path


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


@pytest.fixture(scope="module")
def workers(nats: Nats, model_dir: Path) -> Iterator[list[Worker]]:
    started = [
        start_worker(nats, *FAST, "--model-path", str(model_dir), "--model-name", AGG)
        for _ in range(2)
    ]
    try:
        yield started
    finally:
        for w in started:
            w.proc.stop()


@pytest.fixture(scope="module")
def frontend(nats: Nats, workers: list[Worker]) -> Iterator[Frontend]:
    front = start_frontend(nats, "--router", "kv", "--max-media-bytes", str(32 * 1024 * 1024))
    try:
        front.wait_workers(AGG, {w.id for w in workers})
        yield front
    finally:
        front.proc.stop()


def test_an_image_of_12_mb_reaches_the_worker_whole(frontend: Frontend) -> None:
    big = png(2000, 2000, 1, level=0)
    assert len(big) > 12_000_000
    (got,) = seen(post(frontend, body(AGG, big)))
    assert got["bytes"] == len(big)
    assert got["hash"] == hashlib.sha256(big).hexdigest()


def test_the_kv_router_follows_the_image(frontend: Frontend) -> None:
    image = png(448, 448, 2)
    first = post(frontend, body(AGG, image, max_tokens=8))
    again = post(frontend, body(AGG, image, max_tokens=8))
    (got,) = seen(post(frontend, body(AGG, image)))
    end = got["offset"] + got["tokens"]
    assert got["tokens"] >= 4 * BLOCK
    # the repeat went where the image is, and its blocks were found there
    assert again.headers["x-rotor-worker"] == first.headers["x-rotor-worker"]
    assert int(again.headers["x-rotor-kv-overlap"]) >= (end // BLOCK) - 1
    assert cached(again) >= end - BLOCK
    # a different image behind the same text: no block from the first image block on
    other = post(frontend, body(AGG, png(448, 448, 3), max_tokens=8))
    assert int(other.headers["x-rotor-kv-overlap"]) <= got["offset"] // BLOCK
    assert cached(other) <= got["offset"]


@pytest.fixture(scope="module")
def disagg(nats: Nats, model_dir: Path) -> Iterator[tuple[Frontend, Worker, Worker]]:
    common = (*FAST, "--model-path", str(model_dir), "--model-name", PD)
    prefill = start_worker(nats, *common, "--disaggregation-mode", "prefill", system=True)
    decode = start_worker(nats, *common, "--disaggregation-mode", "decode", system=True)
    front = start_frontend(nats, "--disagg-policy", "always", "--router", "kv")
    try:
        front.wait_workers(PD, {prefill.id, decode.id})
        yield front, prefill, decode
    finally:
        front.proc.stop()
        prefill.proc.stop()
        decode.proc.stop()


def test_disaggregated_the_decode_worker_gets_the_kv_not_the_image(
    disagg: tuple[Frontend, Worker, Worker],
) -> None:
    front, prefill, decode = disagg
    image = png(448, 448, 4)
    r = post(front, body(PD, image))
    # the answer is the decode worker's: it saw the image's hash and span, no bytes
    (got,) = seen(r)
    assert got["hash"] == hashlib.sha256(image).hexdigest()
    assert got["bytes"] == 0
    assert (
        decode.metric("rotor_engine_kv_fetched_blocks_total")
        >= (got["offset"] + got["tokens"]) // BLOCK - 1
    )
