"""The image workload: one seed, the same PNG bytes; the reuse share is exact
over any run of requests, reused images are the pool's and fresh ones are
never sent twice; the images reach each API in its own part shape; the
flags are checked; the summary counts what was sent."""

from __future__ import annotations

import argparse
import base64
import io
import random
from itertools import islice

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from rotor.bench.args import add_arguments, config_from_args
from rotor.bench.client import build_body
from rotor.bench.images import ImageSpec, content, image_sets, parse_size, render, reuses
from rotor.bench.stats import summarize
from rotor.bench.workload import WorkloadSpec, conversations

TINY = dict(width=8, height=6)  # cheap to render: the properties do not need big pictures


def png(url: str) -> bytes:
    head, _, data = url.partition(",")
    assert head == "data:image/png;base64"
    return base64.b64decode(data)


def config(*argv: str):
    p = argparse.ArgumentParser()
    add_arguments(p)
    return config_from_args(p.parse_args(list(argv)))


def test_an_image_is_a_png_of_the_asked_size_and_its_seed_fixes_its_bytes() -> None:
    data = render(7, 100, 37)
    with Image.open(io.BytesIO(data)) as im:
        assert (im.format, im.size, im.mode) == ("PNG", (100, 37), "RGB")
        assert len(im.getcolors(1 << 16) or ()) > 1  # a picture, not one colour
    assert render(7, 100, 37) == data
    assert render(8, 100, 37) != data


def test_same_seed_same_images_and_the_text_is_the_text_without_images() -> None:
    spec = ImageSpec(per_request=2, reuse=0.5, pool=3, **TINY)
    plain = WorkloadSpec(input_len=12, output_len=4, turns=2)
    with_images = WorkloadSpec(input_len=12, output_len=4, turns=2, images=spec)
    a = list(islice(conversations(with_images, 5), 20))
    assert a == list(islice(conversations(with_images, 5), 20))
    assert a != list(islice(conversations(with_images, 6), 20))
    texts = [[t.text for t in c.turns] for c in islice(conversations(plain, 5), 20)]
    assert [[t.text for t in c.turns] for c in a] == texts
    assert all(len(t.images) == 2 for c in a for t in c.turns)


@settings(max_examples=60, deadline=None)
@given(
    share=st.floats(0, 1),
    per_request=st.integers(1, 3),
    pool=st.integers(3, 6),
    n=st.integers(1, 80),
    seed=st.integers(0, 2**32),
)
def test_the_reuse_share_is_honoured(
    share: float, per_request: int, pool: int, n: int, seed: int
) -> None:
    spec = ImageSpec(per_request=per_request, reuse=share, pool=pool, **TINY)
    sets = list(islice(image_sets(spec, random.Random(seed)), n))
    reused = [s for s in sets if s[0].reused]
    fresh = [s for s in sets if not s[0].reused]
    # every request is all pool or all fresh, and exactly ⌊n × share⌋ reuse (never off by more)
    assert all(len({im.reused for im in s}) == 1 and len(s) == per_request for s in sets)
    assert abs(len(reused) - n * share) < 1
    assert [bool(s[0].reused) for s in sets] == [reuses(k, share) for k in range(n)]
    pool_urls = {im.url for s in reused for im in s}
    fresh_urls = [im.url for s in fresh for im in s]
    assert len(pool_urls) <= pool  # reusing requests draw from a pool of `pool` images
    assert all(len({im.url for im in s}) == per_request for s in reused)  # no image twice in one
    assert len(set(fresh_urls)) == len(fresh_urls)  # a fresh image is never sent again
    assert not pool_urls & set(fresh_urls)


def test_a_reused_image_is_sent_again_byte_for_byte() -> None:
    spec = ImageSpec(per_request=1, reuse=0.8, pool=2, **TINY)
    sets = list(islice(image_sets(spec, random.Random(1)), 50))
    urls = [s[0].url for s in sets if s[0].reused]
    assert len(urls) == 40 and len(set(urls)) == 2
    assert all(s[0].size == len(png(s[0].url)) for s in sets)


def test_the_images_go_first_in_each_apis_own_part_shape() -> None:
    spec = ImageSpec(per_request=2, **TINY)
    images = next(image_sets(spec, random.Random(0)))
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": content("hi", images)}]
    url0, url1 = images[0].url, images[1].url
    chat = build_body("chat", "m", msgs, 7, False, [])
    assert chat["messages"][1]["content"] == [
        {"type": "image_url", "image_url": {"url": url0}},
        {"type": "image_url", "image_url": {"url": url1}},
        {"type": "text", "text": "hi"},
    ]
    anth = build_body("messages", "m", msgs, 7, False, [])
    assert anth["system"] == "S"
    [user] = anth["messages"]
    source = {"type": "base64", "media_type": "image/png", "data": url0.split(",", 1)[1]}
    assert user["content"][0] == {"type": "image", "source": source}
    assert base64.b64decode(user["content"][1]["source"]["data"]) == png(url1)
    assert user["content"][2] == {"type": "text", "text": "hi"}
    resp = build_body("responses", "m", msgs[1:], 7, False, [])
    assert resp["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_image", "image_url": url0},
                {"type": "input_image", "image_url": url1},
                {"type": "input_text", "text": "hi"},
            ],
        }
    ]
    assert content("hi", ()) == "hi"  # no images: the message is as it always was


def test_image_flags() -> None:
    assert config().workload.images is None
    c = config("--images-per-request", "2", "--image-size", "64x32", "--image-reuse", "0.8")
    assert c.workload.images == ImageSpec(per_request=2, width=64, height=32, reuse=0.8, pool=8)
    c = config("--images-per-request", "1", "--image-size", "300", "--endpoint", "messages")
    assert (c.workload.images.width, c.workload.images.height) == (300, 300)
    assert parse_size("640×480") == (640, 480)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--images-per-request", "1", "--endpoint", "completions"], "needs --endpoint chat"),
        (["--images-per-request", "-1"], "--images-per-request must be ≥ 0"),
        (["--images-per-request", "1", "--image-size", "0x5"], "--image-size '0x5'"),
        (["--images-per-request", "1", "--image-size", "big"], "expected WxH"),
        (["--images-per-request", "1", "--image-reuse", "1.5"], "--image-reuse is a share"),
        (
            ["--images-per-request", "3", "--image-reuse", "0.5", "--image-pool", "2"],
            "--image-pool 2 is smaller",
        ),
        (["--images-per-request", "1", "--image-pool", "0"], "--image-pool must be positive"),
    ],
)
def test_bad_image_flags(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(*argv)


def test_a_trace_takes_no_images(tmp_path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n')
    with pytest.raises(ValueError, match="no --images-per-request"):
        config("--trace", str(trace), "--images-per-request", "1")


def test_the_summary_counts_the_images_sent() -> None:
    base = {"start_s": 0.0, "ttft_s": 0.1, "e2e_s": 0.2, "itl_s": [], "prompt_tokens": 5}
    records = [
        {**base, "output_tokens": 2, "error": None, "images": 2, "image_bytes": 300},
        {**base, "output_tokens": 2, "error": None, "images": 2, "image_bytes": 100}
        | {"images_reused": 2},
        {**base, "output_tokens": None, "error": {"kind": "http_400", "message": "x"}}
        | {"images": 1, "image_bytes": 50, "images_reused": 0},
    ]
    assert summarize(records, 1.0)["images"] == {
        "sent": 5,
        "bytes": 450,
        "reused": 2,
        "requests_with_images": 3,
    }
    assert "images" not in summarize([{**records[0], "images": 0, "image_bytes": 0}], 1.0)
