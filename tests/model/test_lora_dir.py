"""An adapter directory is checked before any engine loads it: what it must
hold (PEFT's config with a rank and target modules, safetensors or .bin
weights), and an AdapterError naming the file at fault otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rotor.model.lora import AdapterError, check_name, read_adapter

from support.adapters import write_adapter, write_safetensors


def test_a_peft_adapter_reads_with_its_rank_and_targets(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a", rank=4, targets=("q_proj", "k_proj"))
    adapter = read_adapter("a", str(path))
    assert (adapter.rank, adapter.target_modules, adapter.path) == (
        4,
        ("q_proj", "k_proj"),
        str(path),
    )


def test_older_bin_weights_and_a_single_target_string_are_accepted(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a")
    (path / "adapter_model.safetensors").unlink()
    (path / "adapter_model.bin").write_bytes(b"torch pickle, not read here")
    config = json.loads((path / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps({**config, "target_modules": "q_proj"}))
    assert read_adapter("a", str(path)).target_modules == ("q_proj",)


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ([1, 2], "not a JSON object"),
        ({"r": 0, "target_modules": ["q"]}, "'r' (the rank) must be a positive integer, got 0"),
        ({"r": 8.5, "target_modules": ["q"]}, "got 8.5"),
        ({"r": 8, "target_modules": []}, "'target_modules'"),
        ({"r": 8}, "'target_modules'"),
    ],
)
def test_a_bad_config_is_named(tmp_path: Path, config: object, says: str) -> None:
    path = write_adapter(tmp_path / "a")
    (path / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(AdapterError, match="adapter_config.json") as e:
        read_adapter("a", str(path))
    assert says in e.value.message and e.value.param == "lora_path"


def test_weights_without_tensors_are_named(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a")
    write_safetensors(path / "adapter_model.safetensors", {})
    with pytest.raises(AdapterError, match="adapter_model.safetensors: holds no tensors"):
        read_adapter("a", str(path))


@pytest.mark.parametrize("name", ["", " a", "a b", "a/b", "-a", "x" * 129, 7])
def test_names_a_url_and_a_model_field_can_carry(name: object) -> None:
    with pytest.raises(AdapterError) as e:
        check_name(name)
    assert e.value.param == "lora_name"


@pytest.mark.parametrize("name", ["sql", "org/x".replace("/", "_"), "v1.2", "a:b@c+d-e"])
def test_ordinary_names_pass(name: str) -> None:
    assert check_name(name) == name
