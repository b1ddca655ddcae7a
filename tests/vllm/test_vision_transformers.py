"""rotor.model.vision's image token counts equal transformers' processors
(which vLLM 0.32's prompt replacement follows), read from the same files.

Each family's expansion is checked against transformers' own PIL image
processor and processor, built from the directory rotor loads: the count
formulas over many sizes (hypothesis), and the processors' token ids over
real images. transformers is a test dependency only (rotor counts without it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image
from transformers import PreTrainedTokenizerFast
from transformers.models.clip import CLIPImageProcessorPil
from transformers.models.gemma3 import Gemma3ImageProcessorPil, Gemma3Processor
from transformers.models.idefics3 import Idefics3ImageProcessorPil, Idefics3Processor
from transformers.models.llava import LlavaProcessor
from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

from rotor.model.card import ModelCard
from rotor.model.loader import load_model
from rotor.model.tokenizer import Tokenizer
from rotor.model.vision import Vision, idefics3_grid, qwen_tokens

from support.vlm import (
    write_gemma3_dir,
    write_idefics3_dir,
    write_json,
    write_llava_dir,
    write_qwen2_vl_dir,
)

# image sides: from a sliver to a large photo
_sides = st.integers(min_value=1, max_value=5000)


def load_vision(root: Path) -> tuple[ModelCard, Tokenizer, Vision]:
    card, tok = load_model(root)
    vision = Vision.of(card, tok)
    assert vision is not None
    return card, tok, vision


def hf_tokenizer(root: Path, **extra: Any) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_file=str(root / "tokenizer.json"), **extra)


def image(width: int, height: int) -> Image.Image:
    return Image.new("RGB", (width, height), (200, 30, 90))


@settings(max_examples=600, deadline=None)
@given(
    _sides,
    _sides,
    st.sampled_from([14, 16]),
    st.sampled_from([1, 2]),
    st.sampled_from([(56 * 56, 28 * 28 * 1280), (3136, 12544), (65536, 16777216), (1, 10**6)]),
)
def test_qwen_count_equals_transformers(
    width: int, height: int, patch: int, merge: int, pixels: tuple[int, int]
) -> None:
    min_pixels, max_pixels = pixels
    processor = Qwen2VLImageProcessorPil(
        min_pixels=min_pixels, max_pixels=max_pixels, patch_size=patch, merge_size=merge
    )
    if max(width, height) / min(width, height) > 200:
        with pytest.raises(ValueError, match="aspect ratio"):
            qwen_tokens(width, height, patch, merge, min_pixels, max_pixels)
        with pytest.raises(ValueError, match="aspect ratio"):
            processor.get_number_of_image_patches(height, width)
        return
    expected = processor.get_number_of_image_patches(height, width) // (merge * merge)
    assert qwen_tokens(width, height, patch, merge, min_pixels, max_pixels) == expected


@pytest.mark.parametrize(
    ("width", "height"),
    [(56, 56), (1, 1), (28, 27), (300, 100), (100, 300), (640, 480), (1920, 1080), (13, 2000)],
)
def test_qwen_expansion_equals_processed_image(tmp_path: Path, width: int, height: int) -> None:
    """The directory's own files, read by transformers, resize a real image to
    the grid rotor counts: N × <|image_pad|> with N = t·h·w / merge²."""
    root = write_qwen2_vl_dir(tmp_path / "qwen", min_pixels=3136, max_pixels=200 * 200)
    _, tok, vision = load_vision(root)
    processor = Qwen2VLImageProcessorPil.from_pretrained(root)
    t, h, w = processor(images=[image(width, height)])["image_grid_thw"][0].tolist()
    ids = vision.expand(width, height)
    assert ids == [tok.token_to_id("<|image_pad|>")] * (t * h * w // 4)
    assert vision.placeholder == "<|image_pad|>"
    assert vision.placeholder_id == tok.token_to_id("<|image_pad|>")
    assert vision.family == "qwen2_vl"
    assert vision.unsupported is None


def test_qwen_size_form_of_qwen3_vl(tmp_path: Path) -> None:
    """Qwen3-VL's files say `size: {shortest_edge, longest_edge}` and patch 16."""
    root = write_qwen2_vl_dir(tmp_path / "qwen3", architecture="Qwen3VLForConditionalGeneration")
    write_json(
        root / "preprocessor_config.json",
        {
            "image_processor_type": "Qwen2VLImageProcessorFast",
            "size": {"shortest_edge": 65536, "longest_edge": 16777216},
            "patch_size": 16,
            "merge_size": 2,
            "temporal_patch_size": 2,
        },
    )
    card, _, vision = load_vision(root)
    assert card.vision is not None
    assert (card.vision["min_pixels"], card.vision["max_pixels"]) == (65536, 16777216)
    processor = Qwen2VLImageProcessorPil.from_pretrained(root)
    for width, height in [(56, 56), (1024, 768), (4000, 3000), (33, 900)]:
        expected = processor.get_number_of_image_patches(height, width) // 4
        assert len(vision.expand(width, height)) == expected
    assert len(vision.expand(56, 56)) == 64  # lifted to min_pixels: 256 × 256


def test_qwen_min_max_pixels_override_size(tmp_path: Path) -> None:
    """Flat min_pixels / max_pixels win over size's edges, as transformers reads them."""
    root = write_qwen2_vl_dir(tmp_path / "qwen")
    write_json(
        root / "preprocessor_config.json",
        {
            "size": {"shortest_edge": 65536, "longest_edge": 16777216},
            "min_pixels": 3136,
            "max_pixels": 12544,
        },
    )
    _, _, vision = load_vision(root)
    processor = Qwen2VLImageProcessorPil.from_pretrained(root)
    for width, height in [(56, 56), (1024, 768)]:
        expected = processor.get_number_of_image_patches(height, width) // 4
        assert len(vision.expand(width, height)) == expected
    assert len(vision.expand(56, 56)) == 4


@settings(max_examples=600, deadline=None)
@given(
    _sides,
    _sides,
    st.sampled_from([(4 * 364, 364), (1536, 384), (112, 56), (364, 364), (1000, 333)]),
)
@example(1000, 333, (1000, 333))  # the short side made even (334) needs a second row
def test_idefics3_grid_equals_transformers(width: int, height: int, sizes: tuple[int, int]) -> None:
    """(rows, cols) as the image processor's get_number_of_image_patches, which
    vLLM's Idefics3 replacement uses."""
    longest_edge, tile = sizes
    processor = Idefics3ImageProcessorPil(
        size={"longest_edge": longest_edge}, max_image_size={"longest_edge": tile}
    )
    _, rows, cols = processor.get_number_of_image_patches(height, width)
    assert idefics3_grid(width, height, longest_edge, tile) == (rows, cols)


def idefics3_processor(root: Path) -> Idefics3Processor:
    config = json.loads((root / "processor_config.json").read_text(encoding="utf-8"))
    return Idefics3Processor(
        image_processor=Idefics3ImageProcessorPil.from_pretrained(root),
        tokenizer=hf_tokenizer(root),
        image_seq_len=config["image_seq_len"],
    )


def test_idefics3_without_splitting_equals_processor(tmp_path: Path) -> None:
    root = write_idefics3_dir(tmp_path / "idefics3")
    _, tok, vision = load_vision(root)
    processor = idefics3_processor(root)
    ids = [tok.token_to_id(t) for t in ("<fake_token_around_image>", "<global-img>")]
    image_id = vision.placeholder_id
    expected = [ids[0], ids[1], image_id, image_id, image_id, image_id, ids[0]]
    for width, height in [(56, 56), (1, 1), (300, 20), (2000, 1500)]:
        hf = processor(text="<image>", images=[image(width, height)])["input_ids"][0]
        assert vision.expand(width, height) == hf == expected
    assert vision.placeholder == "<image>"
    assert vision.family == "idefics3"


@pytest.mark.parametrize(
    ("width", "height"),
    [(56, 56), (57, 20), (112, 112), (300, 100), (100, 300), (111, 56), (4000, 3000), (5, 900)],
)
def test_idefics3_tiles_equal_processor(tmp_path: Path, width: int, height: int) -> None:
    """With do_image_splitting: a tile per row and column, `<row_i_col_j>`,
    newlines, then the global image — the processor's very ids."""
    root = write_idefics3_dir(tmp_path / "idefics3", splitting=True, longest_edge=168, tile=56)
    _, _, vision = load_vision(root)
    processor = idefics3_processor(root)
    hf = processor(text="<image>", images=[image(width, height)])["input_ids"][0]
    assert vision.expand(width, height) == hf
    rows, cols = idefics3_grid(width, height, 168, 56)
    assert hf.count(vision.placeholder_id) == 4 * (rows * cols + 1)


@pytest.mark.parametrize(
    ("tower", "strategy", "added", "count"),
    [
        ("clip_vision_model", "default", 1, 16),
        ("clip_vision_model", "full", 1, 17),
        ("siglip_vision_model", "default", 0, 15),
        ("siglip_vision_model", "full", 0, 16),
    ],
)
def test_llava_count_equals_processor(
    tmp_path: Path, tower: str, strategy: str, added: int, count: int
) -> None:
    root = write_llava_dir(tmp_path / "llava", tower, strategy)
    _, _, vision = load_vision(root)
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessorPil(
            size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56}
        ),
        tokenizer=hf_tokenizer(root),
        patch_size=14,
        vision_feature_select_strategy=strategy,
        num_additional_image_tokens=added,
        image_token="<image>",
    )
    for width, height in [(56, 56), (640, 480), (3, 700)]:
        hf = processor(text="<image>", images=[image(width, height)])["input_ids"][0]
        assert vision.expand(width, height) == hf == [vision.placeholder_id] * count


def test_gemma3_expansion_equals_processor(tmp_path: Path) -> None:
    root = write_gemma3_dir(tmp_path / "gemma3", seq_len=5)
    _, tok, vision = load_vision(root)
    processor = Gemma3Processor(
        image_processor=Gemma3ImageProcessorPil.from_pretrained(root),
        tokenizer=hf_tokenizer(
            root,
            extra_special_tokens={
                "boi_token": "<start_of_image>",
                "eoi_token": "<end_of_image>",
                "image_token": "<image_soft_token>",
            },
        ),
        image_seq_length=5,
    )
    for width, height in [(56, 56), (1000, 200)]:
        hf = processor(text="<start_of_image>", images=[image(width, height)])["input_ids"][0]
        assert vision.expand(width, height) == hf
    soft = tok.token_to_id("<image_soft_token>")
    assert soft is not None
    assert vision.expand(10, 10).count(soft) == 5
    assert vision.placeholder == "<start_of_image>"
