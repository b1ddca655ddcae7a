"""Disaggregated serving over real vLLM on CPU, all real processes: a
nats-server, a prefill and a decode `rotor worker out=vllm` (each its own
vLLM engine), and frontends deciding per request. The prompt's KV moves
through rotor's storage connector; greedy prefill + decode is the
aggregated answer token for token, with the decode side provably loading
the KV (the stored files exist, the decode worker counts the blocks it
loaded into an engine that never saw the prompt, and the files are gone
once loaded); a hand-over nobody loads is dropped by the frontend at once,
or runs out of its hold."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from rotor.config import ModelConfig
from rotor.engines.registry import engine_spec
from rotor.engines.vllm import disagg
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

from support.cluster import Frontend, Worker, nats_server, start_frontend, start_worker, wait_for
from support.llama import add_llama_weights
from support.models import chatml_model
from support.plane import Plane, request_plane
from support.vllm_setup import START_TIMEOUT, VLLM_ARGS, VLLM_ENV

ANSWER = 8  # tokens of each greedy answer
BLOCK = 32  # vLLM's block size here
HOLD = 10  # the prefill worker's --kv-hold-timeout (s)
LONG = "Tell me everything about the history of Paris. " * 20


@dataclass
class Cluster:
    prefill: Worker
    decode: Worker
    always: Frontend  # prefills every request on the prefill worker
    local: Frontend  # prefills every request on its decode worker: the aggregated answer
    plane: Plane
    store: Path

    def stored(self) -> list[str]:
        return sorted(p.name for p in self.store.iterdir()) if self.store.exists() else []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("vllm-disagg")
    model = add_llama_weights(chatml_model(root, "tiny"), 2048)
    store = root / "kv"
    # the storage path the way a user gives it: merged over rotor's default config
    engine_words = [
        "--",
        *VLLM_ARGS,
        "--kv-transfer-config",
        json.dumps({"kv_connector_extra_config": {"shared_storage_path": str(store)}}),
    ]
    with nats_server() as nats:
        procs: list[Any] = []
        try:
            workers = []
            for mode, extra in (("prefill", ("--kv-hold-timeout", str(HOLD))), ("decode", ())):
                worker = start_worker(
                    nats, "out=vllm", "--model-path", str(model), "--disaggregation-mode", mode,
                    *extra, *engine_words, env=VLLM_ENV, timeout=START_TIMEOUT, system=True,
                )  # fmt: skip
                procs.append(worker.proc)
                workers.append(worker)
            prefill, decode = workers
            always = start_frontend(nats, "--disagg-policy", "always", "--router", "kv")
            procs.append(always.proc)
            local = start_frontend(nats, "--disagg-policy", "isl", "--disagg-min-tokens", "100000")
            procs.append(local.proc)
            for frontend in (always, local):
                frontend.wait_workers("tiny", {prefill.id, decode.id})
            with request_plane(nats) as plane:
                yield Cluster(prefill, decode, always, local, plane, store)
        finally:
            for proc in reversed(procs):
                proc.stop()


def _request(rid: str, prompt: list[int], tokens: int, notes: dict[str, Any]) -> EngineRequest:
    return EngineRequest(
        rid,
        "tiny",
        prompt,
        sampling=SamplingParams(temperature=0.0),
        stop=StopParams(max_tokens=tokens, ignore_eos=True),
        annotations=notes,
    )


def _tokens(outs: list[EngineOutput]) -> list[int]:
    return [t for out in outs for t in out.token_ids]


def _prefill(cluster: Cluster, rid: str, prompt: list[int]) -> EngineOutput:
    outs = cluster.plane.collect(cluster.prefill.id, _request(rid, prompt, 1, {PREFILL_ONLY: True}))
    assert len(outs) == 1 and len(outs[0].token_ids) == 1 and outs[0].finish == "length", outs
    assert outs[0].kv_transfer is not None
    return outs[0]


def _decode(
    cluster: Cluster, rid: str, prompt: list[int], first: EngineOutput, **extra: Any
) -> list[EngineOutput]:
    transfer = {**(first.kv_transfer or {}), "worker": cluster.prefill.id, **extra}
    request = _request(rid, prompt + first.token_ids, ANSWER - 1, {KV_TRANSFER: transfer})
    return cluster.plane.collect(cluster.decode.id, request)


def _aggregated(cluster: Cluster, rid: str, prompt: list[int]) -> list[int]:
    """The answer of one engine that computes the prompt itself."""
    return _tokens(cluster.plane.collect(cluster.prefill.id, _request(rid, prompt, ANSWER, {})))


def _pinned(cluster: Cluster) -> float:
    return cluster.prefill.metric("rotor_engine_kv_blocks_pinned")


@pytest.mark.parametrize("length", [200, 192])  # 192: the prompt ends on a block boundary
def test_prefill_then_decode_is_the_aggregated_answer(cluster: Cluster, length: int) -> None:
    prompt = [(i * 7 + length) % 500 + 1 for i in range(length)]
    first = _prefill(cluster, f"p{length}", prompt)
    transfer = first.kv_transfer
    assert transfer is not None
    params = transfer["params"]
    stored = (length - 1) // BLOCK * BLOCK  # whole blocks short of the last token
    assert transfer["engine"] == "vllm" and transfer["connector"] == NAME
    assert params["do_remote_prefill"] is True and params["stored_tokens"] == stored
    assert transfer["transfer_id"] == params["storage_key"] == storage_key(prompt[:stored])
    assert sorted(p.name for p in (cluster.store / params["storage_key"]).iterdir()) == [
        "model.layers.0.self_attn.attn.safetensors",
        "model.layers.1.self_attn.attn.safetensors",
    ]
    assert _pinned(cluster) == stored // BLOCK  # held for its decode worker

    fetched = cluster.decode.metric("rotor_engine_kv_fetched_blocks_total")
    rest = _decode(cluster, f"d{length}", prompt, first)
    # the decode worker loaded the blocks into an engine that never saw this
    # prompt (vLLM's cached tokens are the prefill side's hits: none)
    assert (
        cluster.decode.metric("rotor_engine_kv_fetched_blocks_total") == fetched + stored // BLOCK
    )
    assert rest[0].cached_tokens == 0
    assert params["storage_key"] not in cluster.stored()  # one hand-over: gone once loaded
    assert _pinned(cluster) == 0

    assert first.token_ids + _tokens(rest) == _aggregated(cluster, f"a{length}", prompt)
    assert len(first.token_ids + _tokens(rest)) == ANSWER


def _chat(frontend: Frontend, stream: bool, max_tokens: int = ANSWER) -> tuple[str, dict, str]:
    """(text, usage, x-rotor-worker) of one greedy chat request."""
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": LONG}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),
    }
    url = frontend.v1 + "/chat/completions"
    if not stream:
        r = httpx.post(url, json=body, timeout=120)
        assert r.status_code == 200, r.text
        answer = r.json()
        return (
            answer["choices"][0]["message"]["content"],
            answer["usage"],
            r.headers["x-rotor-worker"],
        )
    text: list[str] = []
    usage: dict[str, Any] = {}
    with httpx.stream("POST", url, json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        header = r.headers["x-rotor-worker"]
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                assert "error" not in chunk, chunk
                text.extend(c["delta"].get("content") or "" for c in chunk["choices"])
                usage = chunk.get("usage") or usage
    return "".join(text), usage, header


@pytest.mark.parametrize("stream", [False, True])
def test_a_frontend_hands_the_prompt_over_and_answers_as_aggregated(
    cluster: Cluster, stream: bool
) -> None:
    prefill, decode = cluster.prefill, cluster.decode
    fetched = decode.metric("rotor_engine_kv_fetched_blocks_total")
    text, usage, header = _chat(cluster.always, stream)
    assert header == f"prefill={prefill.id}, decode={decode.id}"
    loaded = decode.metric("rotor_engine_kv_fetched_blocks_total") - fetched
    alone_text, alone_usage, alone_header = _chat(cluster.local, stream)
    assert alone_header == decode.id  # computed where it decodes
    assert text == alone_text and text
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert usage[key] == alone_usage[key]
    # the first time, the decode worker loaded every stored block (it never
    # saw the prompt); the second time it holds them already, and vLLM's
    # prefix cache usually says so (it loads none), but what it keeps is
    # vLLM's business. Either way nothing stays stored or held
    full = (usage["prompt_tokens"] - 1) // BLOCK
    assert loaded == full if not stream else loaded in (0, full)
    wait_for("the hand-over gone", lambda: not cluster.stored() and _pinned(cluster) == 0)


def test_an_answer_of_one_token_drops_its_hand_over_at_once(cluster: Cluster) -> None:
    expired = cluster.prefill.metric("rotor_engine_kv_hold_timeouts_total")
    generated = cluster.decode.metric("rotor_engine_generated_tokens_total")
    _text, usage, header = _chat(cluster.always, False, max_tokens=1)
    assert usage["completion_tokens"] == 1
    assert header.startswith(f"prefill={cluster.prefill.id}")
    # nobody will load it: the frontend tells the prefill worker, which deletes it
    wait_for("the hand-over dropped", lambda: not cluster.stored() and _pinned(cluster) == 0)
    assert cluster.prefill.metric("rotor_engine_kv_hold_timeouts_total") == expired  # not expired
    assert cluster.decode.metric("rotor_engine_generated_tokens_total") == generated  # never asked


def test_an_unloaded_hand_over_expires_and_its_decode_computes_the_prompt(
    cluster: Cluster,
) -> None:
    prompt = [(i * 11) % 400 + 3 for i in range(150)]
    expired = cluster.prefill.metric("rotor_engine_kv_hold_timeouts_total")
    first = _prefill(cluster, "p-lost", prompt)
    assert first.kv_transfer is not None
    key = first.kv_transfer["transfer_id"]
    assert key in cluster.stored() and _pinned(cluster) == 4
    # nobody comes for it: the hold runs out, deletes it, and says so
    wait_for("the hold to run out", lambda: _pinned(cluster) == 0, HOLD + 30)
    assert key not in cluster.stored()
    assert cluster.prefill.metric("rotor_engine_kv_hold_timeouts_total") == expired + 1

    decode = cluster.decode
    failures = decode.metric("rotor_engine_kv_fetch_failures_total")
    fetched = decode.metric("rotor_engine_kv_fetched_blocks_total")
    with pytest.raises(EngineError) as refused:  # enforced: said before any output
        _decode(cluster, "d-enforced", prompt, first, enforce=True)
    assert (refused.value.kind, refused.value.cause) == ("unavailable", "kv_transfer")
    rest = _decode(cluster, "d-lost", prompt, first)  # otherwise computed here
    assert decode.metric("rotor_engine_kv_fetch_failures_total") == failures + 2
    assert decode.metric("rotor_engine_kv_fetched_blocks_total") == fetched  # nothing loaded
    assert first.token_ids + _tokens(rest) == _aggregated(cluster, "a-lost", prompt)


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
