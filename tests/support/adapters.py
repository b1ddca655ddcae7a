"""LoRA adapter directories in PEFT's format, written by the tests (nothing
downloaded): `adapter_config.json` and an `adapter_model.safetensors` of
float32 tensors, the bytes laid out by hand (safetensors: a little-endian
u64 header length, the JSON header, then the data)."""

from __future__ import annotations

import json
import struct
from pathlib import Path


def write_adapter(
    path: Path,
    rank: int = 8,
    targets: tuple[str, ...] = ("q_proj", "v_proj"),
    tensors: dict[str, tuple[list[int], list[float]]] | None = None,
) -> Path:
    """An adapter at `path` (made if missing): the config, and the tensors
    (name → shape, values; by default one small A and B per target)."""
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "target_modules": list(targets),
        "bias": "none",
    }
    (path / "adapter_config.json").write_text(json.dumps(config))
    if tensors is None:
        prefix = "base_model.model.model.layers.0.self_attn"
        tensors = {}
        for t in targets:
            tensors[f"{prefix}.{t}.lora_A.weight"] = ([rank, 4], [0.01] * (rank * 4))
            tensors[f"{prefix}.{t}.lora_B.weight"] = ([4, rank], [0.02] * (rank * 4))
    write_safetensors(path / "adapter_model.safetensors", tensors)
    return path


def write_safetensors(file: Path, tensors: dict[str, tuple[list[int], list[float]]]) -> None:
    header: dict[str, object] = {}
    data = b""
    for name, (shape, values) in tensors.items():
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {
            "dtype": "F32",
            "shape": shape,
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)  # the format pads the header to 8 bytes
    file.write_bytes(struct.pack("<Q", len(head)) + head + data)
