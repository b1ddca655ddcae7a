"""A tiny random LoRA adapter in PEFT's format for support/llama.py's tiny Llama.

`adapter_config.json` (rank `r`, `lora_alpha`, the adapted modules) and
`adapter_model.safetensors` with PEFT's key names
(`base_model.model.model.layers.{i}.self_attn.{q_proj,v_proj}.lora_{A,B}.weight`,
A `[r, in]`, B `[out, r]`), as vLLM's `LoRAModel.from_local_checkpoint`
reads them. B is not zero (a freshly initialised PEFT adapter's is) and is
large enough that greedy answers change. `merged_weights` is what the
adapter means: W + B @ A * alpha / r, for transformers to compute with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.llama import HEADS, HIDDEN, KV_HEADS, LAYERS

TARGETS = ("q_proj", "v_proj")
PREFIX = "base_model.model."
# the output size of each adapted projection
OUT = {"q_proj": HEADS * (HIDDEN // HEADS), "v_proj": KV_HEADS * (HIDDEN // HEADS)}


def tiny_lora(
    directory: Path, base_model: Path, rank: int = 8, alpha: int = 16, seed: int = 1
) -> Path:
    """A PEFT LoRA adapter of `rank` for the tiny Llama at `base_model`, in `directory`."""
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(base_model),
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "target_modules": list(TARGETS),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
    }
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    gen = torch.Generator().manual_seed(seed)
    weights: dict[str, torch.Tensor] = {}
    for i in range(LAYERS):
        for module in TARGETS:
            key = f"{PREFIX}model.layers.{i}.self_attn.{module}"
            weights[f"{key}.lora_A.weight"] = torch.randn(rank, HIDDEN, generator=gen) * 0.3
            weights[f"{key}.lora_B.weight"] = torch.randn(OUT[module], rank, generator=gen) * 0.3
    save_file(weights, str(directory / "adapter_model.safetensors"))
    return directory


def merged_weights(model_dir: Path, adapter_dir: Path) -> dict[str, Any]:
    """The base model's weights with the adapter merged in (W + B @ A * alpha / r)."""
    from safetensors.torch import load_file

    weights = load_file(str(model_dir / "model.safetensors"))
    config = json.loads((adapter_dir / "adapter_config.json").read_text("utf-8"))
    scale = config["lora_alpha"] / config["r"]
    lora = load_file(str(adapter_dir / "adapter_model.safetensors"))
    for i in range(LAYERS):
        for module in config["target_modules"]:
            key = f"model.layers.{i}.self_attn.{module}"
            a, b = lora[f"{PREFIX}{key}.lora_A.weight"], lora[f"{PREFIX}{key}.lora_B.weight"]
            weights[f"{key}.weight"] = weights[f"{key}.weight"] + b @ a * scale
    return weights
