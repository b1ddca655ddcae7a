"""`rotor bench`'s image workload end to end, against a mocker serving a
vision-language model: the server counts each image's tokens into the prompt
(the same text with and without images differs by the same count for images
of one size), a reused image hits the prefix cache where fresh ones do not,
and each API takes the images in its own parts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from support.server import Server, rotor_server
from support.vlm import write_qwen2_vl_dir

pytestmark = pytest.mark.e2e

BLOCK = 16  # the mocker's default KV block size
N = 6
COMMON = ["--input-len", "20", "--output-len", "4", "--seed", "3", "--no-progress"]
ONE_BY_ONE = ["--concurrency", "1", "--num-requests", str(N), "--warmup", "0"]
IMAGES = ["--images-per-request", "1", "--image-size", "224x224"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model = tmp_path_factory.mktemp("vlm") / "qwen2-vl"
    write_qwen2_vl_dir(model, max_pixels=224 * 224)  # 224 × 224: 64 image tokens
    with rotor_server("out=mocker", "--speedup-ratio", "0", "--model-path", str(model)) as srv:
        yield srv


def bench(srv: Server, out: Path, *argv: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "rotor.cli", "bench", "--url", srv.v1, "--output-dir", str(out)]
        + [*COMMON, *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [level] = orjson.loads((out / "results.json").read_bytes())["levels"]
    assert level["summary"]["failed"] == 0, level["summary"]["errors"]
    if "--images-per-request" in argv:
        assert "images sent" in proc.stdout  # the note under the table
    return dict(level)


def test_image_tokens_are_counted_and_a_reused_image_hits_the_cache(
    server: Server, tmp_path: Path
) -> None:
    plain = bench(server, tmp_path / "plain", *ONE_BY_ONE)
    fresh = bench(server, tmp_path / "fresh", *ONE_BY_ONE, *IMAGES)
    reused = bench(
        server, tmp_path / "reused", *ONE_BY_ONE, *IMAGES, "--image-reuse", "1", "--image-pool", "1"
    )
    # the same text (one seed) with one 224 × 224 image: the same number of tokens more
    extra = {
        f["prompt_tokens"] - p["prompt_tokens"]
        for p, f in zip(plain["requests"], fresh["requests"], strict=True)
    }
    [image_tokens] = extra
    assert image_tokens > 2 * BLOCK
    assert [r["prompt_tokens"] for r in reused["requests"]] == [
        r["prompt_tokens"] for r in fresh["requests"]
    ]
    assert fresh["summary"]["images"]["sent"] == reused["summary"]["images"]["sent"] == N
    assert (fresh["summary"]["images"]["reused"], reused["summary"]["images"]["reused"]) == (0, N)
    assert len({r["image_bytes"] for r in reused["requests"]}) == 1
    # the one pool image: new to the server at first, then its blocks hit every time
    first, *again = zip(fresh["requests"], reused["requests"], strict=True)
    assert first[1]["cached_tokens"] <= first[0]["cached_tokens"] + BLOCK
    for f, r in again:
        assert r["cached_tokens"] >= f["cached_tokens"] + image_tokens - 2 * BLOCK


@pytest.mark.parametrize("endpoint", ["chat", "messages", "responses"])
def test_each_api_takes_the_images(server: Server, tmp_path: Path, endpoint: str) -> None:
    level = bench(
        server,
        tmp_path,
        "--endpoint",
        endpoint,
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--warmup",
        "0",
        "--images-per-request",
        "2",
        "--image-size",
        "64x48",
        "--image-reuse",
        "0.5",
    )
    assert level["summary"]["images"] == {
        "sent": 8,
        "bytes": sum(r["image_bytes"] for r in level["requests"]),
        "reused": 4,
        "requests_with_images": 4,
    }
    assert all(r["prompt_tokens"] > 20 for r in level["requests"])
