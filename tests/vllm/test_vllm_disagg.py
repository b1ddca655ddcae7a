"""Disaggregated serving over real vLLM on CPU: a prefill engine and a decode
engine (two vLLM engine processes) hand the prompt's KV over through rotor's
storage connector, and greedy prefill + decode is the aggregated answer token
for token, with the decode side provably loading the KV (the stored files
exist, the decode side's connector reports the stored tokens loaded into an
engine that never saw the prompt, and the files are gone once loaded)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from rotor.config import ModelConfig
from rotor.engines.registry import engine_spec
from rotor.engines.vllm import disagg
from rotor.engines.vllm.engine import VLLMEngine
from rotor.engines.vllm.storage_connector import NAME, storage_key
from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    EngineError,
    EngineOutput,
    EngineRequest,
    SamplingParams,
    StopParams,
)
from rotor.serve.build import load

from support.llama import add_llama_weights
from support.models import chatml_model
from support.vllm_setup import VLLM_ARGS, VLLM_ENV

ANSWER = 8  # tokens of each greedy answer


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engines(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    """A prefill and a decode vLLM engine sharing one storage directory."""
    patch = pytest.MonkeyPatch()
    for key, value in VLLM_ENV.items():
        patch.setenv(key, value)
    root = tmp_path_factory.mktemp("vllm-disagg")
    model = add_llama_weights(chatml_model(root, "tiny"), 2048)
    store = root / "kv"
    card, _tok = load(ModelConfig(model_path=str(model)), engine_spec("vllm"))
    # the storage path the way a user gives it: merged over rotor's default config
    words = [
        *VLLM_ARGS,
        "--kv-transfer-config",
        json.dumps({"kv_connector_extra_config": {"shared_storage_path": str(store)}}),
    ]
    prefill = VLLMEngine(card, words, "prefill")
    decode = VLLMEngine(card, words, "decode")
    try:
        await prefill.start()
        await decode.start()
        yield {"prefill": prefill, "decode": decode, "store": store}
    finally:
        await prefill.stop()
        await decode.stop()
        patch.undo()


def _request(rid: str, prompt: list[int], tokens: int, notes: dict[str, Any]) -> EngineRequest:
    return EngineRequest(
        rid,
        "tiny",
        prompt,
        sampling=SamplingParams(temperature=0.0),
        stop=StopParams(max_tokens=tokens, ignore_eos=True),
        annotations=notes,
    )


async def _run(engine: VLLMEngine, request: EngineRequest) -> list[EngineOutput]:
    return [out async for out in engine.generate(request)]


def _tokens(outs: list[EngineOutput]) -> list[int]:
    return [t for out in outs for t in out.token_ids]


async def _prefill(engine: VLLMEngine, rid: str, prompt: list[int]) -> EngineOutput:
    outs = await _run(engine, _request(rid, prompt, 1, {PREFILL_ONLY: True}))
    assert len(outs) == 1 and len(outs[0].token_ids) == 1 and outs[0].finish == "length", outs
    assert outs[0].kv_transfer is not None
    return outs[0]


def _decode(rid: str, prompt: list[int], first: EngineOutput, **extra: Any) -> EngineRequest:
    transfer = {**(first.kv_transfer or {}), "worker": "prefill-1", **extra}
    return _request(rid, prompt + first.token_ids, ANSWER - 1, {KV_TRANSFER: transfer})


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("length", [200, 192])  # 192: the prompt ends on a block boundary
async def test_prefill_then_decode_is_the_aggregated_answer(
    engines: dict[str, Any], length: int
) -> None:
    prefill, decode, store = engines["prefill"], engines["decode"], engines["store"]
    prompt = [(i * 7 + length) % 500 + 1 for i in range(length)]

    first = await _prefill(prefill, f"p{length}", prompt)
    transfer = first.kv_transfer
    assert transfer is not None
    params = transfer["params"]
    stored = (length - 1) // 32 * 32  # whole blocks short of the last token
    assert transfer["engine"] == "vllm" and transfer["connector"] == NAME
    assert params["do_remote_prefill"] is True and params["stored_tokens"] == stored
    assert params["storage_key"] == storage_key(prompt[:stored])
    folder = store / params["storage_key"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "model.layers.0.self_attn.attn.safetensors",
        "model.layers.1.self_attn.attn.safetensors",
    ]

    fetched = decode.state().kv_blocks_fetched
    rest = await _run(decode, _decode(f"d{length}", prompt, first))
    # the connector says what it loaded into a decode engine that never saw
    # this prompt (vLLM's cached tokens are the prefill side's hits: none)
    assert decode.state().kv_blocks_fetched == fetched + stored // 32
    assert rest[0].cached_tokens == 0
    assert not folder.exists()  # one hand-over: the stored KV is gone once loaded

    whole = await _run(prefill, _request(f"a{length}", prompt, ANSWER, {}))
    assert first.token_ids + _tokens(rest) == _tokens(whole)
    assert len(_tokens(whole)) == ANSWER


@pytest.mark.asyncio(loop_scope="module")
async def test_a_lost_hand_over_is_computed_here_or_refused_when_enforced(
    engines: dict[str, Any],
) -> None:
    prefill, decode = engines["prefill"], engines["decode"]
    prompt = [(i * 11) % 400 + 3 for i in range(150)]
    first = await _prefill(prefill, "p-lost", prompt)
    assert first.kv_transfer is not None
    # the stored KV is taken away (the hold ran out, the disk was cleaned)
    (engines["store"] / first.kv_transfer["params"]["storage_key"]).rename(
        engines["store"] / "elsewhere"
    )
    failures, fetched = decode.state().kv_fetch_failures, decode.state().kv_blocks_fetched
    with pytest.raises(EngineError) as refused:
        await _run(decode, _decode("d-enforced", prompt, first, enforce=True))
    assert (refused.value.kind, refused.value.cause) == ("unavailable", "kv_transfer")

    rest = await _run(decode, _decode("d-lost", prompt, first))
    assert decode.state().kv_fetch_failures == failures + 2
    assert decode.state().kv_blocks_fetched == fetched  # computed here, nothing loaded
    whole = await _run(prefill, _request("a-lost", prompt, ANSWER, {}))
    assert first.token_ids + _tokens(rest) == _tokens(whole)


def test_the_users_kv_transfer_config_is_merged_over_the_default(tmp_path: Path) -> None:
    user, rest = disagg.split_config(
        ["--dtype", "float32", '--kv-transfer-config={"kv_connector_extra_config": {"a": 1}}']
    )
    assert rest == ["--dtype", "float32"] and user == {"kv_connector_extra_config": {"a": 1}}
    assert disagg.transfer_config("agg", str(tmp_path), None, "cpu") is None
    config = disagg.transfer_config("decode", str(tmp_path), user, "cpu")
    assert config is not None and config["kv_role"] == "kv_consumer"
    assert config["kv_load_failure_policy"] == "recompute"
    if config["kv_connector"] == NAME:  # no nixl here
        extra = config["kv_connector_extra_config"]
        assert extra["a"] == 1 and extra["shared_storage_path"] == disagg.default_storage(
            str(tmp_path)
        )
    other = disagg.transfer_config("prefill", str(tmp_path), {"kv_connector": "X"}, "cpu")
    assert other == {
        "kv_role": "kv_producer",
        "kv_connector": "X",
        "kv_load_failure_policy": "recompute",
    }


def test_the_worker_mode_reaches_vllm(tmp_path: Path) -> None:
    """`rotor worker out=vllm --disaggregation-mode prefill` builds the engine
    with its connector's role (no engine started: the config is the point)."""
    model = add_llama_weights(chatml_model(tmp_path, "tiny"), 2048)
    spec = engine_spec("vllm")
    card, tok = load(ModelConfig(model_path=str(model)), spec)
    built = {
        mode: spec.build(card, tok, {"engine_args": list(VLLM_ARGS), "disaggregation_mode": mode})
        for mode in ("agg", "prefill", "decode")
    }
    assert built["agg"].args.kv_transfer_config is None
    assert built["prefill"].args.kv_transfer_config.kv_role == "kv_producer"
    assert built["decode"].args.kv_transfer_config.kv_role == "kv_consumer"
