"""pipeline/images.py: a request's images loaded before its prompt, or a 400
naming the part — a text-only model, a family rotor cannot count, an engine
that takes no images, more images than `--limit-mm-per-prompt`, an image the
model's processor refuses by its size — and what /metrics counts of it."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from rotor.media.limits import MediaLimits
from rotor.model.builtin import builtin_test_model
from rotor.model.loader import load_model
from rotor.pipeline.errors import RequestError
from rotor.pipeline.images import ImageLoader
from rotor.pipeline.served import ServedModel

from support.vlm import write_qwen2_vl_dir


def png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (1, 2, 3)).save(buf, "PNG")
    return buf.getvalue()


def url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def messages(*images: bytes) -> list[dict[str, Any]]:
    parts = [{"type": "image_url", "image_url": {"url": url(i)}} for i in images]
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What?"}, *parts]},
    ]


def vlm(tmp_path: Path, engine_takes_images: bool = True, **kw: Any) -> ServedModel:
    card, tok = load_model(write_qwen2_vl_dir(tmp_path / "vlm", **kw))
    card.capabilities.images = engine_takes_images
    return ServedModel.build(card, tok)


async def test_images_load_in_order_with_their_sizes_and_hashes(tmp_path: Path) -> None:
    loader = ImageLoader.build(MediaLimits())
    a, b = png(60, 40), png(30, 90)
    found = await loader.load(vlm(tmp_path), messages(a, b))
    assert [(i.data, i.width, i.height) for i in found] == [(a, 60, 40), (b, 30, 90)]
    assert loader.counts.loaded["data"] == 2 and loader.counts.bytes["data"] == len(a) + len(b)
    assert loader.counts.seconds.count == 2
    assert await loader.load(vlm(tmp_path), messages()) == []


async def test_a_text_only_model_names_the_first_image_part() -> None:
    card, tok = builtin_test_model()
    loader = ImageLoader.build(MediaLimits())
    with pytest.raises(RequestError) as caught:
        await loader.load(ServedModel.build(card, tok), messages(png(8, 8)))
    assert str(caught.value) == (
        "messages[1].content[1] is an image: the model 'mock-model' takes text only"
    )
    assert caught.value.param == "messages" and loader.counts.failures["text_only"] == 1


async def test_an_engine_that_takes_no_images_is_named(tmp_path: Path) -> None:
    with pytest.raises(RequestError, match="the engine serving 'vlm' takes no images"):
        await ImageLoader.build(MediaLimits()).load(
            vlm(tmp_path, engine_takes_images=False), messages(png(8, 8))
        )


async def test_a_family_rotor_cannot_count_says_why(tmp_path: Path) -> None:
    model = vlm(tmp_path, architecture="KimiVLForConditionalGeneration")
    assert model.vision is not None and model.vision.unsupported is not None
    with pytest.raises(RequestError) as caught:
        await ImageLoader.build(MediaLimits()).load(model, messages(png(8, 8)))
    assert str(caught.value).startswith("messages[1].content[1] is an image: ")
    assert "KimiVLForConditionalGeneration" in str(caught.value)


async def test_more_images_than_the_limit_is_refused_unread(tmp_path: Path) -> None:
    loader = ImageLoader.build(MediaLimits(limit_per_prompt={"image": 1}))
    with pytest.raises(RequestError, match="holds 2 images; at most 1 are allowed"):
        await loader.load(vlm(tmp_path), messages(png(8, 8), png(9, 9)))
    assert loader.counts.loaded["data"] == 0 and loader.counts.failures["too_many"] == 1


async def test_a_size_the_processor_refuses_names_its_part(tmp_path: Path) -> None:
    loader = ImageLoader.build(MediaLimits())
    with pytest.raises(RequestError) as caught:
        await loader.load(vlm(tmp_path), messages(png(10, 10), png(1, 400)))
    assert str(caught.value).startswith(
        "messages[1].content[2]: the model cannot take this image: "
    )
    assert loader.counts.failures["not_an_image"] == 1


async def test_a_part_converted_from_another_api_is_named_as_its_client_wrote_it(
    tmp_path: Path,
) -> None:
    part = {"type": "image_url", "image_url": {"url": url(b"nope")}, "where": "input[0].content[3]"}
    with pytest.raises(RequestError) as caught:
        await ImageLoader.build(MediaLimits()).load(
            vlm(tmp_path), [{"role": "user", "content": [part]}]
        )
    assert str(caught.value).startswith("input[0].content[3]: ")
