"""rotor.model.vision and the loader: what a model directory's processor files
become (`card.vision`), how a chat template renders image parts, and every way
a directory can be wrong. tests/vllm/test_vision_transformers.py checks the
counts themselves against transformers' processors.

Each test writes a real directory (tests/support/vlm.py) and loads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rotor.model.card import ModelCard
from rotor.model.loader import ModelLoadError, load_model
from rotor.model.template import ChatTemplate
from rotor.model.tokenizer import Tokenizer
from rotor.model.vision import Vision, read_vision
from rotor.protocol.codec import decode_card, encode_card

from support.models import chatml_model
from support.vlm import (
    write_gemma3_dir,
    write_idefics3_dir,
    write_json,
    write_llava_dir,
    write_qwen2_vl_dir,
)


def load_vision(root: Path) -> tuple[ModelCard, Tokenizer, Vision]:
    card, tok = load_model(root)
    vision = Vision.of(card, tok)
    assert vision is not None
    return card, tok, vision


def test_qwen_refuses_a_sliver(tmp_path: Path) -> None:
    _, _, vision = load_vision(write_qwen2_vl_dir(tmp_path / "qwen"))
    with pytest.raises(ValueError, match="aspect ratio"):
        vision.expand(2010, 10)
    with pytest.raises(ValueError, match="no area"):
        vision.expand(0, 10)


def test_qwen_template_renders_one_placeholder_per_image(tmp_path: Path) -> None:
    card, tok, vision = load_vision(write_qwen2_vl_dir(tmp_path / "qwen"))
    template = ChatTemplate(card.chat_templates["default"], eos_token=card.eos_token)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image"},
                {"type": "text", "text": "and"},
                {"type": "image"},
                {"type": "text", "text": "what differs?"},
            ],
        }
    ]
    text = template.render(messages)
    assert (
        "<|vision_start|><|image_pad|><|vision_end|>and"
        "<|vision_start|><|image_pad|><|vision_end|>what differs?" in text
    )
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok.encode(text)
    assert ids.count(vision.placeholder_id) == 2
    numbered = template.render(messages, add_vision_id=True)
    assert "Picture 1: <|vision_start|>" in numbered and "Picture 2: <|vision_start|>" in numbered


def test_idefics3_tiles_text_shape(tmp_path: Path) -> None:
    root = write_idefics3_dir(
        tmp_path / "smolvlm",
        architecture="SmolVLMForConditionalGeneration",
        image_seq_len=2,
        splitting=True,
        longest_edge=112,
        tile=56,
    )
    _, tok, vision = load_vision(root)
    ids = vision.expand(112, 56)  # 1 row, 2 columns
    text = tok.decode(ids, skip_special_tokens=False)
    tile = "<fake_token_around_image><row_1_col_{}><image><image>"
    whole = "<fake_token_around_image><global-img><image><image><fake_token_around_image>"
    assert text == tile.format(1) + tile.format(2) + "\n\n" + whole


def test_idefics3_template_renders_image_parts(tmp_path: Path) -> None:
    card, tok, vision = load_vision(write_idefics3_dir(tmp_path / "idefics3"))
    template = ChatTemplate(card.chat_templates["default"], bos_token=card.bos_token)
    text = template.render(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}]
    )
    assert text == "<|im_start|>User:<image>What is it?<end_of_utterance>\nAssistant:"
    assert tok.encode(text).count(vision.placeholder_id) == 1


def test_llava_pixtral_tower_is_unsupported(tmp_path: Path) -> None:
    root = write_llava_dir(tmp_path / "llava", "pixtral", "full")
    card, tok = load_model(root)
    assert card.vision is not None and card.vision["family"] == "unsupported"
    vision = Vision.of(card, tok)
    assert vision is not None and vision.unsupported is not None
    assert "pixtral" in vision.unsupported


def test_gemma3_pan_and_scan_is_unsupported(tmp_path: Path) -> None:
    card, tok = load_model(write_gemma3_dir(tmp_path / "gemma3", seq_len=5, pan_and_scan=True))
    vision = Vision.of(card, tok)
    assert vision is not None and vision.unsupported is not None
    assert "do_pan_and_scan" in vision.unsupported
    with pytest.raises(ValueError, match="do_pan_and_scan"):
        vision.expand(56, 56)


# --- the loader --------------------------------------------------------------


def test_loader_fills_card_vision(tmp_path: Path) -> None:
    root = write_qwen2_vl_dir(tmp_path / "qwen", video=True)
    card, tok = load_model(root)
    assert card.vision == {
        "family": "qwen2_vl",
        "architecture": "Qwen2VLForConditionalGeneration",
        "placeholder": "<|image_pad|>",
        "tokens": ["<|image_pad|>", "<|vision_start|>", "<|vision_end|>"],
        "patch_size": 14,
        "merge_size": 2,
        "min_pixels": 3136,
        "max_pixels": 12544,
        "placeholder_id": tok.token_to_id("<|image_pad|>"),
        "video": True,
    }
    json.dumps(card.vision)  # it crosses NATS in the card
    assert read_vision(root, json.loads((root / "config.json").read_text())) == card.vision


def test_text_only_model_has_no_vision(tmp_path: Path) -> None:
    card, tok = load_model(chatml_model(tmp_path))
    assert card.vision is None
    assert Vision.of(card, tok) is None
    vlm, _ = load_model(write_qwen2_vl_dir(tmp_path / "qwen"))
    assert Vision.of(vlm, None) is None  # no tokenizer: nothing to count with


def test_unknown_vlm_is_unsupported_not_an_error(tmp_path: Path) -> None:
    root = write_qwen2_vl_dir(tmp_path / "other")
    write_json(
        root / "config.json",
        {"architectures": ["KimiVLForConditionalGeneration"], "vision_config": {}},
    )
    card, tok = load_model(root)
    assert card.vision == {
        "family": "unsupported",
        "architecture": "KimiVLForConditionalGeneration",
        "reason": "rotor cannot count the image tokens of KimiVLForConditionalGeneration",
    }
    vision = Vision.of(card, tok)
    assert vision is not None
    assert vision.unsupported == card.vision["reason"]
    assert (vision.placeholder, vision.placeholder_id) == ("", -1)
    with pytest.raises(ValueError, match="KimiVL"):
        vision.expand(56, 56)


def test_image_processor_alone_makes_a_vlm(tmp_path: Path) -> None:
    """No vision_config, no known architecture, but an image processor: a VLM rotor cannot count."""
    root = chatml_model(tmp_path)
    write_json(root / "preprocessor_config.json", {"image_processor_type": "FooImageProcessor"})
    card, _ = load_model(root)
    assert card.vision is not None and card.vision["family"] == "unsupported"


def test_nested_processor_config_wins(tmp_path: Path) -> None:
    root = write_qwen2_vl_dir(tmp_path / "qwen")
    write_json(
        root / "processor_config.json",
        {"image_processor": {"min_pixels": 3136, "max_pixels": 1000000}},
    )
    card, _ = load_model(root)
    assert card.vision is not None and card.vision["max_pixels"] == 1000000


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("preprocessor_config.json", "{not json", "invalid JSON at line 1"),
        ("preprocessor_config.json", "[1, 2]", "expected a JSON object"),
        ("preprocessor_config.json", {"min_pixels": -1}, "min_pixels must be a positive"),
        ("preprocessor_config.json", {"max_pixels": "big"}, "max_pixels must be a positive"),
        ("preprocessor_config.json", {"size": {"height": 3}}, "size must be an object"),
        ("preprocessor_config.json", {"patch_size": 0}, "patch_size must be a positive"),
        ("preprocessor_config.json", {"do_resize": "yes"}, "do_resize must be true or false"),
        (
            "preprocessor_config.json",
            {"min_pixels": 20000, "max_pixels": 10000},
            "min_pixels 20000 is larger than max_pixels 10000",
        ),
        ("processor_config.json", {"image_processor": 3}, "image_processor must be an object"),
    ],
)
def test_bad_qwen_processor_files(tmp_path: Path, file: str, content: Any, message: str) -> None:
    root = write_qwen2_vl_dir(tmp_path / "qwen")
    text = content if isinstance(content, str) else json.dumps(content)
    (root / file).write_text(text, encoding="utf-8")
    with pytest.raises(ModelLoadError, match=message) as caught:
        load_model(root)
    assert str(root / file) in str(caught.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"image_seq_len": 0}, "image_seq_len must be a positive"),
        ({"image_processor": {"max_image_size": 364}}, "max_image_size must be an object"),
        ({"image_processor": {"size": {"longest_edge": -5}}}, "size.longest_edge must be"),
        ({"image_processor": {"do_image_splitting": 1}}, "do_image_splitting must be true"),
    ],
)
def test_bad_idefics3_processor_files(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    root = write_idefics3_dir(tmp_path / "idefics3")
    file = root / "processor_config.json"
    config = json.loads(file.read_text(encoding="utf-8"))
    config.update(change)
    write_json(file, config)
    with pytest.raises(ModelLoadError, match=message) as caught:
        load_model(root)
    assert str(file) in str(caught.value)


def test_processor_file_not_utf8(tmp_path: Path) -> None:
    root = write_qwen2_vl_dir(tmp_path / "qwen")
    (root / "preprocessor_config.json").write_bytes(b'{"min_pixels": "\xff"}')
    with pytest.raises(ModelLoadError, match="not UTF-8"):
        load_model(root)


def test_qwen_resizing_off_is_unsupported(tmp_path: Path) -> None:
    root = write_qwen2_vl_dir(tmp_path / "qwen")
    write_json(root / "preprocessor_config.json", {"do_resize": False})
    card, _ = load_model(root)
    assert card.vision is not None and card.vision["family"] == "unsupported"
    assert "do_resize is false" in card.vision["reason"]


# --- Vision.of against the tokenizer -----------------------------------------


def test_placeholder_missing_from_tokenizer(tmp_path: Path) -> None:
    card, _ = load_model(write_qwen2_vl_dir(tmp_path / "qwen"))
    _, other = load_model(chatml_model(tmp_path))
    with pytest.raises(ValueError, match="'<\\|image_pad\\|>'.* is not a token of its tokenizer"):
        Vision.of(card, other)


def test_config_image_token_id_must_match(tmp_path: Path) -> None:
    root = write_qwen2_vl_dir(tmp_path / "qwen")
    config = json.loads((root / "config.json").read_text(encoding="utf-8"))
    config["image_token_id"] += 1
    write_json(root / "config.json", config)
    card, tok = load_model(root)
    with pytest.raises(ValueError, match="config.json says the image token is id"):
        Vision.of(card, tok)


def test_expansion_is_a_fresh_list(tmp_path: Path) -> None:
    """Callers may splice the ids in place: the cached replacement stays intact."""
    _, _, vision = load_vision(write_idefics3_dir(tmp_path / "idefics3"))
    first = vision.expand(56, 56)
    first.clear()
    assert len(vision.expand(56, 56)) == 7


# --- counts of the real models' settings (transformers agrees: test_vision_transformers.py)


@pytest.mark.parametrize(
    ("preprocessor", "sizes"),
    [
        # Qwen2-VL's class defaults: 56² to 28²·1280 pixels, 14-pixel patches
        ({"image_processor_type": "Qwen2VLImageProcessor"}, {(1920, 1080): 1222, (640, 480): 391}),
        # Qwen3-VL's files: 256² to 4096² pixels, 16-pixel patches
        (
            {"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16},
            {(1920, 1080): 2040, (640, 480): 300, (56, 56): 64},
        ),
        ({}, {(56, 56): 4, (10, 10): 4}),
    ],
)
def test_qwen_counts(tmp_path: Path, preprocessor: dict[str, Any], sizes: dict[Any, int]) -> None:
    root = write_qwen2_vl_dir(tmp_path / "qwen")
    write_json(root / "preprocessor_config.json", preprocessor)
    _, _, vision = load_vision(root)
    for (width, height), count in sizes.items():
        assert vision.expand(width, height) == [vision.placeholder_id] * count


def test_idefics3_default_tiles(tmp_path: Path) -> None:
    """Idefics3's defaults (longest edge 1456, tiles of 364, 169 tokens each):
    1920 × 1080 is 3 rows of 4 tiles and the global image."""
    root = write_idefics3_dir(tmp_path / "idefics3", image_seq_len=169, splitting=True)
    config = json.loads((root / "processor_config.json").read_text(encoding="utf-8"))
    del config["image_processor"]["size"], config["image_processor"]["max_image_size"]
    write_json(root / "processor_config.json", config)
    _, tok, vision = load_vision(root)
    ids = vision.expand(1920, 1080)
    assert ids.count(vision.placeholder_id) == 169 * (3 * 4 + 1)
    fake, last_tile = tok.token_to_id("<fake_token_around_image>"), tok.token_to_id("<row_3_col_4>")
    assert fake is not None and last_tile is not None
    assert ids.count(fake) == 3 * 4 + 2
    assert ids.count(last_tile) == 1
    assert tok.token_to_id("<row_4_col_1>") not in ids
    assert len(vision.expand(300, 1000)) == len(vision.expand(600, 2000))  # 4 rows of 2


def test_gemma3_text_shape(tmp_path: Path) -> None:
    _, tok, vision = load_vision(write_gemma3_dir(tmp_path / "gemma3", seq_len=3))
    text = tok.decode(vision.expand(640, 480), skip_special_tokens=False)
    assert text == "\n\n<start_of_image>" + "<image_soft_token>" * 3 + "<end_of_image>\n\n"
    assert vision.placeholder == "<start_of_image>" and vision.family == "gemma3"


def test_vision_crosses_the_wire_in_the_card(tmp_path: Path) -> None:
    """A worker publishes the card (protocol/codec); the frontend's Vision from
    the decoded card and tokenizer counts as the worker's would."""
    for root in (
        write_qwen2_vl_dir(tmp_path / "qwen"),
        write_idefics3_dir(tmp_path / "idefics3", splitting=True, longest_edge=112, tile=56),
    ):
        card, tok, vision = load_vision(root)
        wire_card, wire_tok = decode_card(encode_card(card, tok))
        assert wire_card.vision == card.vision
        remote = Vision.of(wire_card, wire_tok)
        assert remote is not None
        for width, height in [(56, 56), (300, 100), (90, 200)]:
            assert remote.expand(width, height) == vision.expand(width, height)
