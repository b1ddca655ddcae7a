"""A vLLM KV connector that hands a prefill's KV to a decode worker through a
directory both can read: vLLM's `ExampleConnector`, made fit for rotor.

The example connector is the one vLLM connector that runs on a CPU-only
machine with nothing else installed, but it stores the KV of *every* request
it sees (on both sides, forever) and loads for any prompt whose prefix was
ever stored. This one keeps its file layout and its per-layer load and save
(the worker side is the example's, unchanged) and changes the policy, on the
scheduler side:

- only a prefill request (kv_transfer_params `do_remote_decode`) is stored,
  and only when its whole prompt is computed in one step (a prompt split
  over chunks is not stored: its decode worker computes it);
- only a decode request (`do_remote_prefill`) loads, once (a preempted
  request recomputes);
- a prefill request finishes with the params a decode request needs
  (`storage_key`, `stored_tokens`), and the stored KV is deleted when the
  decode request that loaded it finishes (the hand-over is one-shot); the
  decode request finishes with `loaded_tokens`, what it really loaded (vLLM
  reports the prefill side's cache hits as its cached tokens, so they
  cannot tell).

vLLM imports it by module path (`kv_connector_module_path`) in its engine
processes; rotor's engine names it in the kv transfer config (`disagg.py`).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import (
    ExampleConnector,
    ExampleConnectorMetadata,
    align_to_block_size,
)
from vllm.utils.hashing import safe_hash

from rotor.engines.vllm.disagg import STORAGE_CONNECTOR, STORAGE_MODULE

NAME = STORAGE_CONNECTOR  # as disagg.py names it to vLLM
MODULE = STORAGE_MODULE


def storage_key(token_ids: list[int]) -> str:
    """The directory name the KV of exactly `token_ids` is stored under (the
    example connector's: a hash of the tokens as int64 bytes)."""
    data = torch.tensor(token_ids, dtype=torch.int64).numpy().tobytes()
    return safe_hash(data, usedforsecurity=False).hexdigest()


def stored_tokens(num_prompt_tokens: int, block_size: int) -> int:
    """How many leading tokens of a prompt the connector stores and loads:
    whole blocks, short of the prompt's last token."""
    return max(0, align_to_block_size(num_prompt_tokens, block_size))


class RotorStorageConnector(ExampleConnector):
    """ExampleConnector that stores prefill requests only and loads decode requests only."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._to_store: set[str] = set()  # prefill requests admitted, not yet stored
        self._stored: dict[str, tuple[str, int]] = {}  # request id -> (key, tokens)
        self._loading: dict[str, tuple[str, int]] = {}  # decode request -> key, tokens loaded

    # -- scheduler side ------------------------------------------------------

    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        params = request.kv_transfer_params or {}
        if not params.get("do_remote_prefill"):
            return 0, False
        tokens = list(request.prompt_token_ids or [])
        count = stored_tokens(len(tokens) - 1, self._block_size)
        if count <= num_computed_tokens or not self._exists(storage_key(tokens[:count])):
            return 0, False
        return count - num_computed_tokens, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        params = request.kv_transfer_params or {}
        if params.get("do_remote_decode"):
            self._to_store.add(request.request_id)
        if params.get("do_remote_prefill"):
            params["do_remote_prefill"] = False  # one load per request
            tokens = list(request.prompt_token_ids or [])
            key = storage_key(tokens[: stored_tokens(len(tokens) - 1, self._block_size)])
            self._loading[request.request_id] = (key, num_external_tokens)
            if num_external_tokens > 0:
                self._requests_need_load[request.request_id] = request

    def build_connector_meta(self, scheduler_output: Any) -> ExampleConnectorMetadata:
        meta = ExampleConnectorMetadata()
        for new in scheduler_output.scheduled_new_reqs:
            tokens = list(new.prompt_token_ids or [])
            if new.req_id in self._requests_need_load:
                # the stored count, +1: the example's meta keeps whole blocks short of the end
                count = stored_tokens(len(tokens) - 1, self._block_size)
                meta.add_request(tokens[: count + 1], new.block_ids[0], self._block_size, False, [])
            elif new.req_id in self._to_store:
                self._to_store.discard(new.req_id)
                scheduled = scheduler_output.num_scheduled_tokens.get(new.req_id, 0)
                if new.num_computed_tokens + scheduled < len(tokens):
                    continue  # chunked: the KV of one step is not the prompt's
                count = stored_tokens(len(tokens), self._block_size)
                if count > 0:
                    meta.add_request(tokens, new.block_ids[0], self._block_size, True, [])
                    self._stored[new.req_id] = (storage_key(tokens[:count]), count)
        self._requests_need_load.clear()
        return meta

    def request_finished(self, request: Any, block_ids: Any) -> tuple[bool, dict[str, Any] | None]:
        rid = request.request_id
        self._to_store.discard(rid)
        loading = self._loading.pop(rid, None)
        if loading is not None:  # a decode request: its KV was handed over once
            key, loaded = loading
            shutil.rmtree(os.path.join(self._storage_path, key), ignore_errors=True)
            return False, {"do_remote_prefill": False, "loaded_tokens": loaded}
        stored = self._stored.pop(rid, None)
        if stored is None:
            return False, None
        key, count = stored
        return False, {"do_remote_prefill": True, "storage_key": key, "stored_tokens": count}

    def _exists(self, key: str) -> bool:
        return os.path.isdir(os.path.join(self._storage_path, key))
