"""How many tokens an image becomes, per vision-language model family.

A VLM's chat template renders ONE placeholder token per image (Qwen2-VL's
`<|image_pad|>`, Idefics3's `<image>`, ...); the model's processor replaces it
with the image's tokens, how many depending on the family and, for some, on
the image's size. rotor counts, routes and hashes the expanded prompt, and
usage must equal vLLM's, so `Vision.expand` gives exactly the ids vLLM 0.32's
prompt replacement gives — in pure Python (no torchvision, no transformers
processors at run time).

`read_vision` reads the model directory once at load and returns a plain map
for `ModelCard.vision` (it crosses NATS in the card); `Vision.of` turns that
map and the tokenizer into the object the request path uses.

Families (by config.json `architectures`):
- `qwen2_vl`: Qwen2-VL, Qwen2.5-VL, Qwen3-VL (and its MoE): `smart_resize` to a
  multiple of patch_size × merge_size within min/max pixels, then
  (h/patch)·(w/patch)/merge² × `<|image_pad|>` (the template wraps it in
  `<|vision_start|>…<|vision_end|>`).
- `idefics3`: Idefics3 and SmolVLM: `<image>` becomes
  `<fake_token_around_image><global-img>` + `<image>`×image_seq_len +
  `<fake_token_around_image>`, preceded, when the processor splits images, by
  one `<fake_token_around_image><row_i_col_j>` + `<image>`×image_seq_len per
  tile, a newline after each row and one more before the global image. The
  rows and columns follow the image processor's `get_number_of_image_patches`,
  which is what vLLM's replacement uses (transformers' own processor splits
  the pixels with a slightly different rounding: they can disagree by a row or
  a column when `size.longest_edge` is not a multiple of the tile size, never
  in the real models' settings; vLLM's answer is the one that reaches the
  model, so it is the one rotor gives; tests/vllm/test_vision_vllm.py checks
  it against vLLM's own processor).
- `llava`: LLaVA (1.5) with a CLIP or SigLIP vision tower: a fixed count from
  vision_config's image_size / patch_size (CLIP adds its class token) and
  `vision_feature_select_strategy` ("default" drops one, "full" keeps all).
- `gemma3`: Gemma 3 without pan-and-scan: `<start_of_image>` becomes
  `\\n\\n<start_of_image>` + `<image_soft_token>`×image_seq_length +
  `<end_of_image>\\n\\n`, tokenized.

Anything else that is a VLM (config.json has a `vision_config`, or the
directory has an image processor) is `{"family": "unsupported",
"architecture": ..., "reason": ...}`: the model still serves text, and an
image part is a 400 that says the reason (never a silent miscount). So is a
supported family configured in a way rotor cannot count (Gemma 3 with
pan-and-scan, LLaVA with a Pixtral tower, Qwen2-VL with resizing off).
A processor file that cannot be read or has wrong values is a
`VisionConfigError` (the loader makes it a ModelLoadError naming the file).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer

QWEN2_VL = "qwen2_vl"
IDEFICS3 = "idefics3"
LLAVA = "llava"
GEMMA3 = "gemma3"
UNSUPPORTED = "unsupported"

_ARCHITECTURES = {
    "Qwen2VLForConditionalGeneration": QWEN2_VL,
    "Qwen2_5_VLForConditionalGeneration": QWEN2_VL,
    "Qwen3VLForConditionalGeneration": QWEN2_VL,
    "Qwen3VLMoeForConditionalGeneration": QWEN2_VL,
    "Idefics3ForConditionalGeneration": IDEFICS3,
    "SmolVLMForConditionalGeneration": IDEFICS3,
    "LlavaForConditionalGeneration": LLAVA,
    "Gemma3ForConditionalGeneration": GEMMA3,
}

# transformers' class defaults, used where the processor files say nothing
_QWEN_MIN_PIXELS = 56 * 56
_QWEN_MAX_PIXELS = 28 * 28 * 1280
_QWEN_PATCH = 14
_QWEN_MERGE = 2
_IDEFICS_LONGEST_EDGE = 4 * 364
_IDEFICS_TILE = 364
_IDEFICS_SEQ_LEN = 169
_IDEFICS_MAX_IMAGE_SIZE = 4096  # transformers' MAX_IMAGE_SIZE
_GEMMA_SEQ_LEN = 256
# vision tower model_type → whether it has a class token (vLLM's encoder info)
_LLAVA_TOWERS = {"clip_vision_model": 1, "siglip_vision_model": 0}
# Qwen's smart_resize refuses images more elongated than this
_QWEN_MAX_RATIO = 200


class VisionConfigError(ValueError):
    """A processor file cannot be read or holds values rotor cannot use."""


def read_vision(root: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The card's `vision` map for the model directory at `root` (whose
    config.json is `config`), or None when the model takes text only."""
    preprocessor_file = root / "preprocessor_config.json"
    processor_file = root / "processor_config.json"
    preprocessor = _read_json(preprocessor_file)
    processor = _read_json(processor_file)
    # transformers 5 nests the image processor in processor_config.json; older
    # directories keep it in preprocessor_config.json (the nested one wins, as
    # in transformers' loader)
    image: dict[str, Any] | None = None
    image_file = processor_file
    nested = processor.get("image_processor") if processor is not None else None
    if nested is not None:
        if not isinstance(nested, dict):
            raise VisionConfigError(f"{processor_file}: image_processor must be an object")
        image = nested
    elif preprocessor is not None:
        image, image_file = preprocessor, preprocessor_file
    listed = config.get("architectures")
    architectures = [a for a in listed if isinstance(a, str)] if isinstance(listed, list) else []
    architecture = architectures[0] if architectures else str(config.get("model_type", "unknown"))
    family = next((_ARCHITECTURES[a] for a in architectures if a in _ARCHITECTURES), None)
    is_vlm = family is not None or isinstance(config.get("vision_config"), dict)
    if image is not None and any(k in image for k in ("image_processor_type", "image_mean")):
        is_vlm = True
    if not is_vlm:
        return None
    if family is None:
        return _unsupported(architecture, f"rotor cannot count the image tokens of {architecture}")
    params = _Params(image or {}, image_file)
    found: dict[str, Any] = {"family": family, "architecture": architecture}
    if family == QWEN2_VL:
        found.update(_qwen(params, config))
    elif family == IDEFICS3:
        found.update(_idefics3(params, processor or {}, processor_file))
    elif family == LLAVA:
        found.update(_llava(config, root / "config.json"))
    else:
        found.update(_gemma3(params, processor or {}, processor_file))
    if found.get("reason"):
        return _unsupported(architecture, found["reason"])
    found["video"] = (root / "video_preprocessor_config.json").is_file()
    return found


class Vision:
    """One model's image processing as rotor counts it (see the module doc)."""

    __slots__ = (
        "family",
        "placeholder",
        "placeholder_id",
        "unsupported",
        "_params",
        "_tok",
        "_cache",
    )

    def __init__(
        self,
        family: str,
        placeholder: str,
        placeholder_id: int,
        unsupported: str | None,
        params: dict[str, Any],
        tokenizer: Tokenizer | None,
    ) -> None:
        self.family = family
        # the ONE token the chat template renders per image ("" when unsupported)
        self.placeholder = placeholder
        self.placeholder_id = placeholder_id  # -1 when unsupported
        # why an image cannot be counted for this model; None when it can
        self.unsupported = unsupported
        self._params = params
        self._tok = tokenizer
        # replacements that depend on the layout only (Idefics3's rows and
        # columns), tokenized once
        self._cache: dict[tuple[int, int], list[int]] = {}

    @classmethod
    def of(cls, card: ModelCard, tokenizer: Tokenizer | None) -> Vision | None:
        """The card's vision with its tokenizer; None for a text-only card (or
        one served without a tokenizer, which cannot count tokens at all).
        ValueError when the card's vision cannot work with this tokenizer."""
        vision = card.vision
        if vision is None or tokenizer is None:
            return None
        family = vision.get("family")
        if family == UNSUPPORTED or family not in _ARCHITECTURES.values():
            reason = vision.get("reason") or f"rotor cannot count the image tokens of {family}"
            return cls(str(family), "", -1, str(reason), dict(vision), None)
        placeholder = vision.get("placeholder")
        if not isinstance(placeholder, str):
            raise ValueError(f"model {card.name}: its vision names no placeholder token")
        for name in vision.get("tokens", [placeholder]):
            if tokenizer.token_to_id(name) is None:
                raise ValueError(
                    f"model {card.name}: {name!r}, a token of its {family} image prompt, "
                    "is not a token of its tokenizer"
                )
        placeholder_id = tokenizer.token_to_id(placeholder)
        assert placeholder_id is not None
        declared = vision.get("placeholder_id")
        if declared is not None and declared != placeholder_id:
            raise ValueError(
                f"model {card.name}: config.json says the image token is id {declared}, "
                f"but the tokenizer gives {placeholder!r} id {placeholder_id}"
            )
        return cls(str(family), placeholder, placeholder_id, None, dict(vision), tokenizer)

    def expand(self, width: int, height: int) -> list[int]:
        """The ids that replace one placeholder token for an image of this size
        (pixels as decoded). ValueError for an image the processor refuses
        (Qwen: more than 200 times longer than wide) or an unsupported model."""
        if self.unsupported is not None:
            raise ValueError(self.unsupported)
        if width <= 0 or height <= 0:
            raise ValueError(f"an image of {width}x{height} pixels has no area")
        p = self._params
        if self.family == QWEN2_VL:
            return [self.placeholder_id] * qwen_tokens(
                width, height, p["patch_size"], p["merge_size"], p["min_pixels"], p["max_pixels"]
            )
        if self.family == LLAVA:
            return [self.placeholder_id] * p["image_tokens"]
        if self.family == IDEFICS3:
            layout = (
                idefics3_grid(width, height, p["longest_edge"], p["tile"])
                if p["splitting"]
                else (0, 0)
            )
        else:
            layout = (0, 0)
        ids = self._cache.get(layout)
        if ids is None:
            ids = self._cache[layout] = self._encode(self._text(*layout))
        return list(ids)

    def _text(self, rows: int, cols: int) -> str:
        p = self._params
        if self.family == GEMMA3:
            return f"\n\n{p['start']}{p['soft'] * p['image_seq_len']}{p['end']}\n\n"
        fake, image = p["fake"], self.placeholder * p["image_seq_len"]
        whole = f"{fake}{p['global']}{image}{fake}"
        if rows == 0 and cols == 0:
            return whole
        tiles = "".join(
            "".join(f"{fake}<row_{r + 1}_col_{c + 1}>{image}" for c in range(cols)) + "\n"
            for r in range(rows)
        )
        return f"{tiles}\n{whole}"

    def _encode(self, text: str) -> list[int]:
        assert self._tok is not None
        return self._tok.encode(text)


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """Qwen2-VL's resize (transformers' `smart_resize`, which vLLM calls): both
    sides a multiple of `factor`, the area within [min_pixels, max_pixels],
    the aspect ratio kept as nearly as that allows."""
    if max(height, width) / min(height, width) > _QWEN_MAX_RATIO:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {_QWEN_MAX_RATIO}, "
            f"got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen_tokens(
    width: int, height: int, patch_size: int, merge_size: int, min_pixels: int, max_pixels: int
) -> int:
    """Qwen2-VL's image tokens: the resized grid of patches over merge²."""
    h, w = smart_resize(height, width, patch_size * merge_size, min_pixels, max_pixels)
    return (h // patch_size) * (w // patch_size) // (merge_size * merge_size)


def idefics3_grid(width: int, height: int, longest_edge: int, tile: int) -> tuple[int, int]:
    """(rows, cols) of Idefics3's tiles for an image, (0, 0) for none: the image
    processor's `get_number_of_image_patches`, as vLLM's replacement uses it."""
    height, width = _rescale_to_max_len(height, width, longest_edge)
    height, width = _scale_below(height, width, _IDEFICS_MAX_IMAGE_SIZE)
    if width >= height:
        resized_width = math.ceil(width / tile) * tile
        resized_height = math.ceil(height / tile) * tile
    else:
        resized_height = math.ceil(height / tile) * tile
        resized_width = math.ceil(width / tile) * tile
    if resized_height > tile or resized_width > tile:
        return math.ceil(resized_height / tile), math.ceil(resized_width / tile)
    return 0, 0


def _rescale_to_max_len(height: int, width: int, max_len: int) -> tuple[int, int]:
    """The longest side to max_len (up or down), the other kept in ratio and even."""
    aspect_ratio = width / height
    if width >= height:
        width = max_len
        height = int(width / aspect_ratio)
        if height % 2 != 0:
            height += 1
    else:
        height = max_len
        width = int(height * aspect_ratio)
        if width % 2 != 0:
            width += 1
    return max(height, 1), max(width, 1)


def _scale_below(height: int, width: int, max_len: int) -> tuple[int, int]:
    """Down to max_len on the longest side when above it, the ratio kept."""
    aspect_ratio = width / height
    if width >= height and width > max_len:
        width = max_len
        height = int(width / aspect_ratio)
    elif height > width and height > max_len:
        height = max_len
        width = int(height * aspect_ratio)
    return max(height, 1), max(width, 1)


class _Params:
    """An image processor's settings, each checked as it is read."""

    def __init__(self, values: dict[str, Any], file: Path) -> None:
        self.values = values
        self.file = file

    def positive(self, key: str, default: int) -> int:
        value = self.values.get(key)
        if value is None:
            return default
        return _positive(value, f"{self.file}: {key}")

    def flag(self, key: str, default: bool) -> bool:
        value = self.values.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise VisionConfigError(f"{self.file}: {key} must be true or false, got {value!r}")
        return value

    def edge(self, key: str, default: int) -> int:
        """A `{"longest_edge": n}` size."""
        value = self.values.get(key)
        if value is None:
            return default
        if not isinstance(value, dict) or "longest_edge" not in value:
            raise VisionConfigError(
                f"{self.file}: {key} must be an object with longest_edge, got {value!r}"
            )
        return _positive(value["longest_edge"], f"{self.file}: {key}.longest_edge")


def _qwen(params: _Params, config: dict[str, Any]) -> dict[str, Any]:
    if not params.flag("do_resize", True):
        return {"reason": f"{params.file}: do_resize is false, which rotor cannot count"}
    size = params.values.get("size")
    min_pixels, max_pixels = _QWEN_MIN_PIXELS, _QWEN_MAX_PIXELS
    if size is not None:
        if not isinstance(size, dict) or not {"shortest_edge", "longest_edge"} & size.keys():
            raise VisionConfigError(
                f"{params.file}: size must be an object with shortest_edge and longest_edge, "
                f"got {size!r}"
            )
        min_pixels = _positive(size.get("shortest_edge", min_pixels), f"{params.file}: size")
        max_pixels = _positive(size.get("longest_edge", max_pixels), f"{params.file}: size")
    min_pixels = params.positive("min_pixels", min_pixels)
    max_pixels = params.positive("max_pixels", max_pixels)
    if min_pixels > max_pixels:
        raise VisionConfigError(
            f"{params.file}: min_pixels {min_pixels} is larger than max_pixels {max_pixels}"
        )
    found: dict[str, Any] = {
        "placeholder": "<|image_pad|>",
        "tokens": ["<|image_pad|>", "<|vision_start|>", "<|vision_end|>"],
        "patch_size": params.positive("patch_size", _QWEN_PATCH),
        "merge_size": params.positive("merge_size", _QWEN_MERGE),
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
    }
    declared = config.get("image_token_id")
    if isinstance(declared, int) and not isinstance(declared, bool):
        found["placeholder_id"] = declared
    return found


def _idefics3(params: _Params, processor: dict[str, Any], processor_file: Path) -> dict[str, Any]:
    seq_len = processor.get("image_seq_len")
    return {
        "placeholder": "<image>",
        "tokens": ["<image>", "<fake_token_around_image>"],
        "fake": "<fake_token_around_image>",
        "global": "<global-img>",
        "image_seq_len": _IDEFICS_SEQ_LEN
        if seq_len is None
        else _positive(seq_len, f"{processor_file}: image_seq_len"),
        "splitting": params.flag("do_image_splitting", True),
        "longest_edge": params.edge("size", _IDEFICS_LONGEST_EDGE),
        "tile": params.edge("max_image_size", _IDEFICS_TILE),
    }


def _llava(config: dict[str, Any], file: Path) -> dict[str, Any]:
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        raise VisionConfigError(f"{file}: a LLaVA config needs a vision_config object")
    tower = vision.get("model_type", "clip_vision_model")
    if tower not in _LLAVA_TOWERS:
        return {"reason": f"rotor cannot count LLaVA's image tokens with a {tower} vision tower"}
    image_size = _positive(vision.get("image_size", 224), f"{file}: vision_config.image_size")
    default_patch = 32 if tower == "clip_vision_model" else 16
    patch = _positive(vision.get("patch_size", default_patch), f"{file}: vision_config.patch_size")
    tokens = (image_size // patch) ** 2 + _LLAVA_TOWERS[tower]
    strategy = config.get("vision_feature_select_strategy", "default")
    if strategy == "default":
        tokens -= 1
    elif strategy != "full":
        raise VisionConfigError(
            f"{file}: vision_feature_select_strategy must be default or full, got {strategy!r}"
        )
    found: dict[str, Any] = {"placeholder": "<image>", "image_tokens": tokens}
    declared = config.get("image_token_index", config.get("image_token_id"))
    if isinstance(declared, int) and not isinstance(declared, bool):
        found["placeholder_id"] = declared
    return found


def _gemma3(params: _Params, processor: dict[str, Any], processor_file: Path) -> dict[str, Any]:
    if params.flag("do_pan_and_scan", False):
        return {"reason": f"{params.file}: do_pan_and_scan is on, which rotor cannot count"}
    seq_len = processor.get("image_seq_length")
    start, soft, end = "<start_of_image>", "<image_soft_token>", "<end_of_image>"
    return {
        "placeholder": start,
        "tokens": [start, soft, end],
        "start": start,
        "soft": soft,
        "end": end,
        "image_seq_len": _GEMMA_SEQ_LEN
        if seq_len is None
        else _positive(seq_len, f"{processor_file}: image_seq_length"),
    }


def _unsupported(architecture: str, reason: str) -> dict[str, Any]:
    return {"family": UNSUPPORTED, "architecture": architecture, "reason": reason}


def _positive(value: Any, where: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise VisionConfigError(f"{where} must be a positive integer, got {value!r}")
    return value


def _read_json(file: Path) -> dict[str, Any] | None:
    """The file's top-level object, or None when it is absent."""
    if not file.exists():
        return None
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise VisionConfigError(f"{file}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except json.JSONDecodeError as e:
        raise VisionConfigError(
            f"{file}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from e
    except OSError as e:
        raise VisionConfigError(f"{file}: cannot be read: {e.strerror or e}") from e
    if not isinstance(value, dict):
        raise VisionConfigError(f"{file}: expected a JSON object")
    return value
