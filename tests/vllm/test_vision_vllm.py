"""rotor's Idefics3 expansion equals vLLM 0.32's own: vLLM's multimodal
processor for the same directory, given the prompt with one `<image>` (as
rotor's vLLM adapter sends it), puts exactly rotor's ids in its place.

Idefics3 is the family vLLM's CPU build can load here (the Qwen-VL, LLaVA and
Gemma 3 model files import torchvision); the others are checked against
transformers' processors (test_vision_transformers.py), which vLLM calls.
No weights: only the processor is built.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from rotor.model.loader import load_model
from rotor.model.vision import Vision

from support.vlm import write_idefics3_dir

pytestmark = pytest.mark.vllm

SIZES = [(56, 56), (1, 1), (300, 100), (100, 300), (57, 20), (111, 56), (5, 900), (4000, 3000)]

Check = Callable[[int, int], tuple[list[int], list[int]]]


def vllm_check(root: Path) -> Check:
    """(vLLM's prompt ids, rotor's) for `[bos] <image> [eos]` and an image of a size."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY

    config = ModelConfig(model=str(root), tokenizer=str(root), dtype="float32", max_model_len=4096)
    processor: Any = MULTIMODAL_REGISTRY.create_processor(config)
    card, tok = load_model(root)
    vision = Vision.of(card, tok)
    assert vision is not None
    first, last = tok.token_to_id("<|im_start|>"), tok.token_to_id("<end_of_utterance>")
    assert first is not None and last is not None

    def check(width: int, height: int) -> tuple[list[int], list[int]]:
        items = processor.info.parse_mm_data({"image": [Image.new("RGB", (width, height))]})
        out = processor([first, vision.placeholder_id, last], items)
        return list(out["prompt_token_ids"]), [first, *vision.expand(width, height), last]

    return check


@pytest.fixture(scope="module")
def tiled(tmp_path_factory: pytest.TempPathFactory) -> Check:
    root = tmp_path_factory.mktemp("vllm") / "idefics3-tiled"
    return vllm_check(write_idefics3_dir(root, splitting=True, longest_edge=168, tile=56))


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Check:
    root = tmp_path_factory.mktemp("vllm") / "idefics3-whole"
    return vllm_check(write_idefics3_dir(root, image_seq_len=9))


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_tiled_expansion_equals_vllm(tiled: Check, width: int, height: int) -> None:
    theirs, ours = tiled(width, height)
    assert ours == theirs


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_whole_image_expansion_equals_vllm(whole: Check, width: int, height: int) -> None:
    theirs, ours = whole(width, height)
    assert ours == theirs
    assert len(ours) == 2 + 3 + 9
