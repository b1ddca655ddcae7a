"""vLLM's engine arguments from the words after `--`, spelled as `vllm serve`
spells them, with the model directory and the context length taken from
rotor (one source of truth): rotor's `--model-path` and `--max-model-len` (or
the model's own context length) are what vLLM gets, and the passthrough may
not name them again. rotor also owns the KV event publisher, the tokenizer
and stats logging, so those are refused too. A prefill or decode worker's
`--kv-transfer-config` is rotor's default for its role with the user's over
it (disagg.py). vLLM's KV offloading (`--kv-offloading-size GiB`, or an
offloading connector named in `--kv-transfer-config`) gets self-describing KV
events, so the relay can name the blocks it offloads (kv_relay.py); it is
refused where vLLM cannot run it, and beside a prefill or decode worker's
connector, which vLLM would replace with its own."""

from __future__ import annotations

from typing import Any

from rotor.engines.vllm.disagg import Mode, split_config, transfer_config

# Options rotor sets itself; a passthrough word naming one is an error.
OWNED = {
    "--model": "give the model directory with rotor's --model-path",
    "--revision": "give the Hub revision with rotor's --revision (vLLM gets its snapshot directory)",
    "--tokenizer": "rotor serves the model directory's own tokenizer",
    "--max-model-len": "give the context length with rotor's --max-model-len",
    "--skip-tokenizer-init": "vLLM needs its tokenizer for structured outputs",
    "--kv-events-config": "rotor configures vLLM's KV event publisher itself",
    "--served-model-name": "give the served names with rotor's own --served-model-name (before --)",
}


def _option(word: str) -> str:
    """The option a passthrough word names, spelled with dashes as vLLM's
    parser accepts either (`--max_loras=2` names `--max-loras`)."""
    return word.split("=", 1)[0].replace("_", "-")


def owned_option(words: list[str]) -> str | None:
    """The first passthrough word that names an option rotor owns, else None."""
    for word in words:
        if _option(word) in OWNED:
            return word.split("=", 1)[0]
    return None


# vLLM's connectors that offload KV below the GPU, and report it in KV events
OFFLOADING_CONNECTORS = ("OffloadingConnector", "SimpleCPUOffloadConnector")
# What vLLM 0.32's native offloading raises (in its engine process, once the
# engine is starting) on a platform that is not a CUDA-alike or XPU GPU
NATIVE_OFFLOAD_REFUSAL = "CPU Offloading is currently only supported on CUDA-alike and XPU GPUs"


def offloading(
    config: dict[str, Any] | None,
    size: float | None,
    backend: str,
    mode: Mode,
    gpu: bool,
) -> dict[str, Any] | None:
    """The kv transfer config with vLLM's KV offloading, when it is asked for
    (`size`: `--kv-offloading-size`, GiB; or an offloading connector in
    `config`): its events made self-describing (the user's word on it kept);
    ValueError where vLLM would fail at start (the native backend without a
    GPU, `gpu`) or would put its connector in place of a handover's (`mode`)."""
    if size is not None:
        if mode != "agg":
            raise ValueError(
                f"vLLM option --kv-offloading-size with --disaggregation-mode {mode}:"
                " vLLM would put its offloading connector in place of the KV handover's"
            )
        if backend == "native" and not gpu:
            raise ValueError(
                "vLLM option --kv-offloading-size: vLLM's native KV offloading needs a GPU"
                f" (a CUDA-alike or XPU one); on this machine vLLM fails at start with"
                f" {NATIVE_OFFLOAD_REFUSAL!r}"
            )
    connector = (config or {}).get("kv_connector")
    if not ((size is not None and backend == "native") or connector in OFFLOADING_CONNECTORS):
        return config
    config = dict(config or {})  # agg: the user's, or vLLM fills it in from the size
    extra = dict(config.get("kv_connector_extra_config") or {})
    extra.setdefault("self_describing_kv_events", True)
    config["kv_connector_extra_config"] = extra
    return config


def given(words: list[str], option: str) -> bool:
    """Whether the passthrough words set `option` (e.g. `--max-lora-rank`)."""
    return any(_option(word) == option for word in words)


def engine_args(
    model_dir: str, max_model_len: int, words: list[str], kv_endpoint: str, mode: Mode = "agg"
) -> Any:
    """`AsyncEngineArgs` for `model_dir` from the passthrough `words`
    (ValueError naming the word that is wrong); a prefill or decode worker
    (`mode`) gets its KV connector (disagg.py)."""
    owned = owned_option(words)
    if owned is not None:
        raise ValueError(f"vLLM option {owned} after '--': {OWNED[_option(owned)]}")
    user, words = split_config(words)
    from vllm.config import KVEventsConfig, KVTransferConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser(prog="rotor run out=vllm --"))
    full = ["--model", model_dir, "--max-model-len", str(max_model_len), *words]
    try:
        namespace, unknown = parser.parse_known_args(full)
    except SystemExit:  # argparse already printed what is wrong
        raise ValueError(f"bad vLLM engine arguments after '--': {' '.join(words)}") from None
    if unknown:
        raise ValueError(f"unknown vLLM engine arguments after '--': {' '.join(unknown)}")
    args = AsyncEngineArgs.from_cli_args(namespace)
    from vllm.platforms import current_platform

    config = transfer_config(mode, model_dir, user, current_platform.device_type)
    gpu = current_platform.is_cuda_alike() or current_platform.is_xpu()
    size, backend = args.kv_offloading_size, args.kv_offloading_backend
    config = offloading(config, size, backend, mode, gpu)
    if config is not None:
        try:
            args.kv_transfer_config = KVTransferConfig(**config)
        except (TypeError, ValueError) as e:
            raise ValueError(f"vLLM option --kv-transfer-config: {e}") from None
    args.kv_events_config = KVEventsConfig(
        enable_kv_cache_events=True, publisher="zmq", endpoint=kv_endpoint, topic=""
    )
    # rotor's own stat logger is the only one: no vLLM Prometheus or log lines.
    args.disable_log_stats = True
    return args
