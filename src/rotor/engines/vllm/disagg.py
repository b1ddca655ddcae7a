"""Disaggregated serving over vLLM's KV connectors: which connector a
prefill or decode worker gets, and how rotor's PREFILL_ONLY / KV_TRANSFER
annotations become vLLM's `kv_transfer_params` and back.

vLLM moves the KV itself; rotor only relays the params its connector hands
out at the end of a prefill request to the decode request. By default:
NixlConnector when the `nixl` package imports (GPU, or CPU with
`kv_buffer_device: cpu`), else rotor's storage connector
(`storage_connector.py`, a directory both workers read). A
`--kv-transfer-config` after `--` is merged over the default (its keys win),
so a user picks another connector or the storage path there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Literal

from rotor.protocol.engine import KV_TRANSFER, PREFILL_ONLY, EngineError, EngineRequest

Mode = Literal["agg", "prefill", "decode"]
# rotor's storage connector (storage_connector.py, loaded by vLLM by this name
# and module; importing it here would import torch and vLLM with the flags)
STORAGE_CONNECTOR = "RotorStorageConnector"
STORAGE_MODULE = "rotor.engines.vllm.storage_connector"
ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}
FLAG = "--kv-transfer-config"

# What a prefill request tells vLLM's connector (vLLM's disagg proxies send
# the same): compute the prompt, keep its blocks for a remote decode.
PREFILL_PARAMS: dict[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def split_config(words: list[str]) -> tuple[dict[str, Any] | None, list[str]]:
    """The user's `--kv-transfer-config` JSON (None: not given) and the other words."""
    rest: list[str] = []
    found: dict[str, Any] | None = None
    i = 0
    while i < len(words):
        name, eq, value = words[i].partition("=")
        if name.replace("_", "-") == FLAG:
            if not eq:
                if i + 1 >= len(words):
                    raise ValueError(f"vLLM option {FLAG} after '--' needs a JSON value")
                value = words[i + 1]
                i += 1
            try:
                found = json.loads(value)
            except ValueError:
                raise ValueError(f"vLLM option {FLAG}: not JSON: {value}") from None
            if not isinstance(found, dict):
                raise ValueError(f"vLLM option {FLAG}: not a JSON object: {value}")
        else:
            rest.append(words[i])
        i += 1
    return found, rest


def default_storage(model_dir: str) -> str:
    """Where two workers of one model on one machine meet without being told."""
    tag = hashlib.sha256(os.path.abspath(model_dir).encode()).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), "rotor-kv", tag)


def default_config(mode: Mode, model_dir: str, device: str) -> dict[str, Any]:
    """The kv transfer config a `mode` worker gets when the user names none."""
    role = ROLES[mode]
    if importlib.util.find_spec("nixl") is not None:
        buffer = "cuda" if device == "cuda" else "cpu"
        return {"kv_connector": "NixlConnector", "kv_role": role, "kv_buffer_device": buffer}
    return {
        "kv_connector": STORAGE_CONNECTOR,
        "kv_connector_module_path": STORAGE_MODULE,
        "kv_role": role,
        "kv_connector_extra_config": {"shared_storage_path": default_storage(model_dir)},
    }


def transfer_config(
    mode: Mode, model_dir: str, user: dict[str, Any] | None, device: str
) -> dict[str, Any] | None:
    """The kv transfer config vLLM gets: in `agg` the user's (or none); else
    the default for `mode` with the user's keys over it. A failed load is
    recomputed unless the user says otherwise (the contract's fallback)."""
    if mode == "agg":
        return user
    config = default_config(mode, model_dir, device)
    if user is not None:
        if user.get("kv_connector", config["kv_connector"]) != config["kv_connector"]:
            config = {"kv_role": config["kv_role"]}  # another connector: nothing of ours
        extra = {
            **config.get("kv_connector_extra_config", {}),
            **user.get("kv_connector_extra_config", {}),
        }
        config = {**config, **user}
        if extra:
            config["kv_connector_extra_config"] = extra
    config.setdefault("kv_load_failure_policy", "recompute")
    return config


@dataclass(slots=True)
class Handover:
    """What one request asks of the connector, and what to tell rotor."""

    params: dict[str, Any] | None  # vLLM's kv_transfer_params for the request
    prefill: bool = False  # a PREFILL_ONLY request: its last output carries kv_transfer
    fetch_tokens: int = 0  # a decode request: tokens the connector should load
    failed: str | None = None  # a decode request whose hand-over cannot work: why
    enforced: bool = False  # ... and the frontend said not to compute it here then


class Relay:
    """Maps rotor's annotations onto one worker's connector."""

    def __init__(self, config: Any) -> None:
        """`config`: vLLM's KVTransferConfig (None: no connector)."""
        self.connector: str | None = getattr(config, "kv_connector", None)
        extra = getattr(config, "kv_connector_extra_config", None) or {}
        self.storage_path: str | None = extra.get("shared_storage_path")

    def request(self, request: EngineRequest) -> Handover:
        """The handover `request` asks for (EngineError: a prefill request
        this worker cannot serve)."""
        notes = request.annotations
        if notes.get(PREFILL_ONLY):
            if request.n != 1:
                raise EngineError("a prefill-only request has n == 1", "refused", "n")
            if not self.connector:
                raise EngineError(
                    "this vLLM worker has no KV connector", "unavailable", cause="kv_transfer"
                )
            return Handover(dict(PREFILL_PARAMS), prefill=True)
        transfer = notes.get(KV_TRANSFER)
        if not isinstance(transfer, dict):
            return Handover(None)
        why = self._refusal(transfer, request.token_ids)
        if why is not None:
            return Handover(None, failed=why, enforced=bool(transfer.get("enforce")))
        params = dict(transfer.get("params") or {})
        tokens = int(params.get("stored_tokens") or params.get("remote_num_tokens") or 0)
        return Handover(params, fetch_tokens=tokens)

    def _refusal(self, transfer: dict[str, Any], prompt: list[int]) -> str | None:
        """Why a hand-over cannot work, when this side can tell beforehand."""
        if not self.connector:
            return "this vLLM worker has no KV connector"
        if transfer.get("engine") != "vllm" or transfer.get("connector") != self.connector:
            return f"the prefill used {transfer.get('connector')!r}, this worker {self.connector!r}"
        params = transfer.get("params")
        if not isinstance(params, dict) or not params.get("do_remote_prefill"):
            return "the prefill worker handed over no KV"
        if self.connector == STORAGE_CONNECTOR and self.storage_path is not None:
            from rotor.engines.vllm.storage_connector import storage_key

            count = int(params.get("stored_tokens") or 0)
            key = params.get("storage_key")
            if key != storage_key(list(prompt[:count])):
                return "the stored KV is not this prompt's"
            if not os.path.isdir(os.path.join(self.storage_path, str(key))):
                return f"no stored KV {key} under {self.storage_path}"
        return None

    def loaded(self, handover: Handover, finished: dict[str, Any] | None) -> int:
        """Tokens a finished decode request loaded: what the connector says
        (rotor's does), else what the prefill offered (NixlConnector's)."""
        said = (finished or {}).get("loaded_tokens")
        return int(said) if isinstance(said, int) else handover.fetch_tokens

    def handed_over(self, params: dict[str, Any] | None) -> dict[str, Any]:
        """The EngineOutput.kv_transfer of a finished prefill request (with
        rotor's connector, its storage key is the transfer's id: what the
        frontend names to drop it)."""
        transfer = {"engine": "vllm", "connector": self.connector, "params": _plain(params)}
        key = (params or {}).get("storage_key")
        if key:
            transfer["transfer_id"] = str(key)
        return transfer


def _plain(value: Any) -> Any:
    """`value` as plain msgpack values (tuples as lists, other objects as str)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
