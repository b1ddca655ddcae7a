"""The image workload: each request's user message carries images, as `data:`
URLs of PNGs drawn with Pillow from a seed, so one seed sends the same bytes.

A share of the requests (`reuse`) takes its images from a small pool made at
the start (the same image again: what an image-aware prefix cache can hit);
the rest get images never sent before. Which requests reuse is spread evenly
(request k reuses when ⌊(k+1)·share⌋ > ⌊k·share⌋), so any run of requests
reuses its exact share, give or take one; which pool images they take is random.
"""

from __future__ import annotations

import base64
import io
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from math import ceil, floor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rotor.bench.workload import Conversation

BLOCK = 16  # pixels per square of colour: PNGs that compress like pictures, not noise


@dataclass(frozen=True)
class ImageSpec:
    per_request: int = 1
    width: int = 512
    height: int = 512
    reuse: float = 0.0  # the share of requests whose images come from the pool
    pool: int = 8  # images in the pool


@dataclass(frozen=True)
class BenchImage:
    url: str  # data:image/png;base64,…
    size: int  # bytes of the PNG (what the server decodes and hashes)
    reused: bool  # taken from the pool


def parse_size(text: str) -> tuple[int, int]:
    """'512x384' (or one number for a square) → (width, height) in pixels."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:[x×*]\s*(\d+)\s*)?", text)
    if not m or int(m[1]) < 1 or (m[2] is not None and int(m[2]) < 1):
        raise ValueError(f"--image-size {text!r}: expected WxH in pixels, e.g. 512x512")
    return int(m[1]), int(m[2] or m[1])


def render(seed: int, width: int, height: int) -> bytes:
    """A PNG of width × height: squares of seeded random colours."""
    from PIL import Image  # only the image workload needs Pillow

    rng = random.Random(seed)
    cols, rows = ceil(width / BLOCK), ceil(height / BLOCK)
    small = Image.frombytes("RGB", (cols, rows), rng.randbytes(cols * rows * 3))
    image = small.resize((cols * BLOCK, rows * BLOCK), Image.Resampling.NEAREST)
    out = io.BytesIO()
    image.crop((0, 0, width, height)).save(out, "PNG")
    return out.getvalue()


def _image(seed: int, spec: ImageSpec, reused: bool) -> BenchImage:
    png = render(seed, spec.width, spec.height)
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    return BenchImage(url, len(png), reused)


def reuses(k: int, share: float) -> bool:
    """Whether request k (0-based) takes its images from the pool."""
    return floor((k + 1) * share) > floor(k * share)


def image_sets(spec: ImageSpec, rng: random.Random) -> Iterator[tuple[BenchImage, ...]]:
    """Each request's images, in order, without end."""
    seeds = [rng.getrandbits(64) for _ in range(spec.pool)]  # drawn even when unused:
    pool = (
        [_image(seed, spec, True) for seed in seeds] if spec.reuse else []
    )  # no fresh image is a pool one
    k = 0
    while True:
        if reuses(k, spec.reuse):
            yield tuple(rng.sample(pool, spec.per_request))
        else:
            yield tuple(_image(rng.getrandbits(64), spec, False) for _ in range(spec.per_request))
        k += 1


def with_images(
    convs: Iterator[Conversation], spec: ImageSpec, rng: random.Random
) -> Iterator[Conversation]:
    """The conversations with images on every turn (their text unchanged)."""
    sets = image_sets(spec, rng)
    for conv in convs:
        turns = tuple(replace(turn, images=next(sets)) for turn in conv.turns)
        yield replace(conv, turns=turns)


def content(text: str, images: tuple[BenchImage, ...]) -> str | list[dict[str, object]]:
    """A chat user message's content: the images first, then the text."""
    if not images:
        return text
    parts: list[dict[str, object]] = [
        {"type": "image_url", "image_url": {"url": im.url}} for im in images
    ]
    parts.append({"type": "text", "text": text})
    return parts
