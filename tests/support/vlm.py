"""Vision-language model directories, written by the tests themselves.

Like tests/support/models.py (whose `write_model_dir` writes the tokenizer
side), plus what makes the directory a VLM to rotor: config.json naming the
architecture, the image processor's settings (small, so an image is a few
tokens: by default a 56 × 56 image is 4 `<|image_pad|>` in Qwen2-VL, 7 tokens in
Idefics3), the family's
special tokens, and a chat template that renders `{"type": "image"}` content
parts the way the family's real template does (rotor's own templates, written
after the real ones' shape). The mocker can serve them; transformers' image
processors read the same files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rotor.model.builtin import CHATML_SPECIAL

from support.models import write_model_dir

QWEN2_VL_SPECIAL = (
    *CHATML_SPECIAL,
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Qwen2-VL's shape: ChatML; a default system turn; each image part (or a part
# that carries an image / image_url) is <|vision_start|><|image_pad|><|vision_end|>,
# optionally numbered ("Picture 1: ") when add_vision_id is set.
QWEN2_VL_TEMPLATE = """\
{%- set seen = namespace(images=0) -%}
{%- for message in messages -%}
{%- if loop.first and message.role != 'system' -%}
<|im_start|>system
You are a helpful assistant.<|im_end|>
{% endif -%}
<|im_start|>{{ message.role }}
{% if message.content is string -%}
{{ message.content }}
{%- else -%}
{%- for part in message.content -%}
{%- if part.type == 'image' or 'image' in part or 'image_url' in part -%}
{%- set seen.images = seen.images + 1 -%}
{%- if add_vision_id %}Picture {{ seen.images }}: {% endif -%}
<|vision_start|><|image_pad|><|vision_end|>
{%- elif 'text' in part -%}
{{ part.text }}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""

IDEFICS3_SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<end_of_utterance>",
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
)

# SmolVLM / Idefics3's shape: "<|im_start|>", then per message "Role:" (a space
# after the colon unless the content starts with an image), each image part
# `<image>`, each message closed by <end_of_utterance> and a newline.
IDEFICS3_TEMPLATE = """\
<|im_start|>
{%- for message in messages -%}
{{ message.role | capitalize }}
{%- if message.content is string -%}
: {{ message.content }}
{%- else -%}
{%- if message.content and message.content[0].type == 'image' %}:{% else %}: {% endif -%}
{%- for part in message.content -%}
{%- if part.type == 'text' %}{{ part.text }}{% elif part.type == 'image' %}<image>{% endif -%}
{%- endfor -%}
{%- endif -%}
<end_of_utterance>
{% endfor -%}
{%- if add_generation_prompt %}Assistant:{% endif -%}
"""


def write_qwen2_vl_dir(
    path: str | Path,
    *,
    architecture: str = "Qwen2VLForConditionalGeneration",
    min_pixels: int = 56 * 56,
    max_pixels: int = 112 * 112,
    patch_size: int = 14,
    merge_size: int = 2,
    video: bool = False,
    context_length: int = 32768,
) -> Path:
    """A Qwen2-VL-shaped model directory: 56 × 56 is 4 image tokens, and no
    image is more than (max_pixels / 28²) = 16 by default."""
    root = write_model_dir(
        path,
        special_tokens=QWEN2_VL_SPECIAL,
        chat_template=QWEN2_VL_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        generation_eos=["<|im_end|>", "<|endoftext|>"],
        context_length=context_length,
    )
    write_json(
        root / "config.json",
        {
            "architectures": [architecture],
            "model_type": "qwen2_vl",
            "max_position_embeddings": context_length,
            "image_token_id": _token_id(root, "<|image_pad|>"),
            "video_token_id": _token_id(root, "<|video_pad|>"),
            "vision_start_token_id": _token_id(root, "<|vision_start|>"),
            "vision_end_token_id": _token_id(root, "<|vision_end|>"),
            "vision_config": {
                "patch_size": patch_size,
                "spatial_merge_size": merge_size,
                "temporal_patch_size": 2,
            },
        },
    )
    # the legacy layout (real Qwen2-VL and Qwen2.5-VL directories): flat keys
    write_json(
        root / "preprocessor_config.json",
        {
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2VLProcessor",
            "min_pixels": min_pixels,
            "max_pixels": max_pixels,
            "patch_size": patch_size,
            "merge_size": merge_size,
            "temporal_patch_size": 2,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
        },
    )
    if video:
        write_json(
            root / "video_preprocessor_config.json",
            {"video_processor_type": "Qwen2VLVideoProcessor", "patch_size": patch_size},
        )
    return root


def write_idefics3_dir(
    path: str | Path,
    *,
    architecture: str = "Idefics3ForConditionalGeneration",
    image_seq_len: int = 4,
    splitting: bool = False,
    longest_edge: int = 56,
    tile: int = 56,
    context_length: int = 8192,
) -> Path:
    """An Idefics3-shaped model directory, its processor in transformers 5's
    nested processor_config.json: without splitting an image is
    `<fake_token_around_image><global-img>` + image_seq_len × `<image>` +
    `<fake_token_around_image>` (3 + image_seq_len: 7 tokens by default)."""
    root = write_model_dir(
        path,
        special_tokens=IDEFICS3_SPECIAL,
        chat_template=IDEFICS3_TEMPLATE,
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|endoftext|>",
        generation_eos=["<end_of_utterance>"],
        context_length=context_length,
    )
    write_json(
        root / "config.json",
        {
            "architectures": [architecture],
            "model_type": "idefics3",
            "image_token_id": _token_id(root, "<image>"),
            "scale_factor": 2,
            "text_config": {"max_position_embeddings": context_length},
            "vision_config": {"image_size": tile, "patch_size": 14},
        },
    )
    write_json(
        root / "processor_config.json",
        {
            "image_processor": {
                "image_processor_type": "Idefics3ImageProcessor",
                "do_image_splitting": splitting,
                "do_resize": True,
                "do_pad": True,
                "do_convert_rgb": True,
                "do_normalize": True,
                "do_rescale": True,
                "image_mean": [0.5, 0.5, 0.5],
                "image_std": [0.5, 0.5, 0.5],
                "rescale_factor": 1 / 255,
                "resample": 1,
                "max_image_size": {"longest_edge": tile},
                "size": {"longest_edge": longest_edge},
            },
            "image_seq_len": image_seq_len,
            "processor_class": "Idefics3Processor",
        },
    )
    return root


LLAVA_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>")
GEMMA_SPECIAL = ("<bos>", "<eos>", "<start_of_image>", "<image_soft_token>", "<end_of_image>")


def write_llava_dir(path: str | Path, tower: str, strategy: str) -> Path:
    """A LLaVA (1.5) directory: a 56 × 56 tower of 14-pixel patches (16 patches)."""
    root = write_model_dir(path, special_tokens=LLAVA_SPECIAL, eos_token="<|im_end|>")
    write_json(
        root / "config.json",
        {
            "architectures": ["LlavaForConditionalGeneration"],
            "image_token_index": _token_id(root, "<image>"),
            "vision_feature_select_strategy": strategy,
            "vision_config": {"model_type": tower, "image_size": 56, "patch_size": 14},
        },
    )
    return root


def write_gemma3_dir(path: str | Path, seq_len: int, pan_and_scan: bool = False) -> Path:
    """A Gemma 3 directory: `seq_len` soft tokens per image."""
    root = write_model_dir(path, special_tokens=GEMMA_SPECIAL, eos_token="<eos>")
    write_json(
        root / "config.json",
        {
            "architectures": ["Gemma3ForConditionalGeneration"],
            "mm_tokens_per_image": seq_len,
            "vision_config": {"model_type": "siglip_vision_model"},
        },
    )
    write_json(
        root / "processor_config.json",
        {"image_seq_length": seq_len, "processor_class": "Gemma3Processor"},
    )
    write_json(
        root / "preprocessor_config.json",
        {"image_processor_type": "Gemma3ImageProcessor", "do_pan_and_scan": pan_and_scan},
    )
    return root


def write_json(file: Path, value: Any) -> None:
    file.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _token_id(root: Path, content: str) -> int:
    tokenizer = json.loads((root / "tokenizer.json").read_text(encoding="utf-8"))
    return next(int(t["id"]) for t in tokenizer["added_tokens"] if t["content"] == content)
