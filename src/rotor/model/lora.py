"""A LoRA adapter directory in PEFT's format, checked before any engine loads it.

An adapter is `adapter_config.json` (its rank `r`, `lora_alpha`,
`target_modules`) beside `adapter_model.safetensors` (or the older
`adapter_model.bin`). Every engine loads the same directories, so the
checks live here: a missing or malformed file is an `AdapterError` naming
that file, which the API answers with a 400, before an engine spends time
on it (vLLM's own error would name neither the file nor the field).
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

CONFIG = "adapter_config.json"
WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
# A safetensors header this large is not an adapter's (the format caps it at 100 MB).
MAX_HEADER = 100 * 1024 * 1024
# An adapter is named in `model` and in a URL path: no spaces, no slashes.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}")


class AdapterError(ValueError):
    """An adapter that cannot be loaded; `param` is the request field at fault."""

    def __init__(self, message: str, param: str = "lora_path") -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class Adapter:
    name: str
    path: str
    rank: int
    target_modules: tuple[str, ...]


def check_name(name: object) -> str:
    """The adapter's name, or AdapterError naming `lora_name`."""
    if not isinstance(name, str) or NAME.fullmatch(name) is None:
        raise AdapterError(
            f"lora_name {name!r}: 1-128 letters, digits and ._:@+- (not starting with one of those)",
            "lora_name",
        )
    return name


def read_adapter(name: str, path: str) -> Adapter:
    """The adapter at `path` once its files check out, else AdapterError
    naming the file (and what is wrong with it)."""
    check_name(name)
    root = Path(path)
    if not root.is_dir():
        raise AdapterError(f"lora_path {path!r}: no such directory")
    config = root / CONFIG
    try:
        raw = json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterError(f"{config}: missing (a PEFT adapter has one)") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise AdapterError(f"{config}: not JSON ({e})") from None
    if not isinstance(raw, dict):
        raise AdapterError(f"{config}: not a JSON object")
    rank = raw.get("r")
    if type(rank) is not int or rank < 1:
        raise AdapterError(f"{config}: 'r' (the rank) must be a positive integer, got {rank!r}")
    targets = raw.get("target_modules")
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise AdapterError(f"{config}: 'target_modules' must name the modules it adapts")
    _check_weights(root)
    return Adapter(name, str(root), rank, tuple(targets))


def _check_weights(root: Path) -> None:
    """The weights file is there and, for safetensors, its header reads."""
    found = next((root / w for w in WEIGHTS if (root / w).is_file()), None)
    if found is None:
        raise AdapterError(f"{root / WEIGHTS[0]}: missing (nor is there {WEIGHTS[1]})")
    if found.suffix != ".safetensors":
        return
    try:
        with found.open("rb") as f:
            head = f.read(8)
            size = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if not 2 <= size <= MAX_HEADER:
                raise ValueError("no header")
            header = json.loads(f.read(size))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise AdapterError(f"{found}: not a safetensors file ({e})") from None
    if not isinstance(header, dict) or not any(k != "__metadata__" for k in header):
        raise AdapterError(f"{found}: holds no tensors")
