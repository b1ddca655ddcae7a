"""LoRA adapters in rotor's vLLM engine: `rotor run out=vllm --lora NAME=DIR`,
one engine for the module, serving the tiny random Llama and tiny random
PEFT adapters written by the tests (support/vllm_lora.py).

An adapter's greedy answer is the one transformers computes with the
adapter merged into the weights (W + B @ A * alpha / r), and not the base
model's; adapters load and unload at run time through `/v1/loras`; what
vLLM cannot load is a 400 with vLLM's reason; an adapter unloaded while an
answer uses it stays in vLLM until that answer has streamed its last token.
The engine's sizing of vLLM's LoRA options and its LoRA bookkeeping (on a
stand-in AsyncLLM, for the order of events) are checked without an engine
running; the KV relay's chaining of an adapter's blocks is in
test_vllm_kv_relay.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rotor.config import ModelConfig
from rotor.engines.registry import engine_spec
from rotor.engines.vllm.lora import VLLMLoras
from rotor.protocol.engine import EngineError
from rotor.serve.build import StartupError, build_engine, load

from support.adapters import write_adapter
from support.llama import add_llama_weights
from support.models import chatml_model
from support.server import Server
from support.vllm_lora import merged_weights, tiny_lora
from support.vllm_setup import VLLM_ARGS, vllm_server
from support.wait import wait_for

MODEL = "tiny"
ADAPTER = "tiny-lora"
RANK = 8  # the startup adapter's: vLLM's max_lora_rank is 8 then
PROMPT = "Paris in the rain, and then the sea"
REMOVED = "vLLM removed LoRA adapter {!r}"
DEFERRED = "LoRA adapter {!r} unloaded; vLLM frees it when its requests end"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-lora")


@pytest.fixture(scope="module")
def model_dir(root: Path) -> Path:
    return add_llama_weights(chatml_model(root, MODEL), 2048)


@pytest.fixture(scope="module")
def adapters(root: Path, model_dir: Path) -> dict[str, Path]:
    """Three adapters of rank 8 (different weights), one of rank 16."""
    return {
        name: tiny_lora(root / "adapters" / name, model_dir, rank=rank, seed=seed)
        for name, rank, seed in (
            (ADAPTER, RANK, 1),
            ("second", RANK, 2),
            ("third", RANK, 3),
            ("rank16", 16, 4),
        )
    }


@pytest.fixture(scope="module")
def server(model_dir: Path, adapters: dict[str, Path]) -> Iterator[Server]:
    lora = f"{ADAPTER}={adapters[ADAPTER]}"
    with vllm_server(model_dir, "--lora", lora, "--log-level", "info") as s:
        yield s


def complete(server: Server, model: str, prompt: list[int], **extra: Any) -> httpx.Response:
    body = {"model": model, "prompt": prompt, "temperature": 0, "max_tokens": 8}
    body |= {"ignore_eos": True, **extra}
    return httpx.post(server.v1 + "/completions", json=body, timeout=120)


def greedy_text(server: Server, model: str, prompt: list[int]) -> str:
    r = complete(server, model, prompt)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["model"] == model and data["usage"]["completion_tokens"] == 8
    return data["choices"][0]["text"]


def load_lora(server: Server, name: str, path: object) -> httpx.Response:
    body = {"lora_name": name, "lora_path": str(path)}
    return httpx.post(server.v1 + "/loras", json=body, timeout=120)


def listed(server: Server) -> dict[str, Any]:
    return {m["id"]: m for m in httpx.get(server.v1 + "/models", timeout=10).json()["data"]}


def transformers_greedy(model_dir: Path, prompt: list[int], adapter: Path | None) -> list[int]:
    """8 greedy tokens from transformers, the adapter (if any) merged in."""
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32).eval()
    if adapter is not None:
        model.load_state_dict(merged_weights(model_dir, adapter))
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


# -- rotor run out=vllm --lora -------------------------------------------------


def test_the_startup_adapter_is_a_model_with_the_base_as_parent(server: Server) -> None:
    models = listed(server)
    assert models[MODEL]["parent"] is None
    assert models[ADAPTER]["parent"] == MODEL
    loras = httpx.get(server.v1 + "/loras", timeout=10).json()
    assert [(e["id"], e["parent"]) for e in loras["data"]] == [(ADAPTER, MODEL)]


def test_greedy_answers_are_transformers_with_the_adapter_merged(
    server: Server, model_dir: Path, adapters: dict[str, Path]
) -> None:
    prompt = server.tokenize(text=PROMPT)
    want_base = transformers_greedy(model_dir, prompt, None)
    want_lora = transformers_greedy(model_dir, prompt, adapters[ADAPTER])
    assert want_lora != want_base  # the adapter changes the answer
    base = greedy_text(server, MODEL, prompt)
    lora = greedy_text(server, ADAPTER, prompt)
    assert base == server.detokenize(want_base)
    assert lora == server.detokenize(want_lora)
    assert greedy_text(server, ADAPTER, prompt) == lora  # and again, from its cached prefix


def test_an_adapter_loads_at_run_time_answers_as_its_own_and_unloads(
    server: Server, model_dir: Path, adapters: dict[str, Path]
) -> None:
    prompt = server.tokenize(text=PROMPT)
    r = load_lora(server, "second", adapters["second"])
    assert r.status_code == 200, r.text
    assert r.json() == {
        "id": "second",
        "object": "lora",
        "path": str(adapters["second"]),
        "parent": MODEL,
    }
    assert listed(server)["second"]["parent"] == MODEL
    want = transformers_greedy(model_dir, prompt, adapters["second"])
    assert greedy_text(server, "second", prompt) == server.detokenize(want)
    again = load_lora(server, "second", adapters["second"])
    assert again.status_code == 400 and "already loaded" in again.json()["error"]["message"]
    # vLLM keeps one adapter loaded (max_cpu_loras 1): the first is loaded again, the same
    first = transformers_greedy(model_dir, prompt, adapters[ADAPTER])
    assert greedy_text(server, ADAPTER, prompt) == server.detokenize(first)

    gone = httpx.delete(server.v1 + "/loras/second", timeout=30)
    assert gone.status_code == 200 and gone.json()["deleted"] is True
    after = complete(server, "second", prompt)
    assert after.status_code == 404, after.text
    assert "second" not in listed(server)
    assert httpx.delete(server.v1 + "/loras/second", timeout=30).status_code == 404
    # unused: freed in vLLM at once (a task: its log line follows)
    wait_for("vLLM to remove 'second'", lambda: REMOVED.format("second") in server.log, 30)
    assert DEFERRED.format("second") not in server.log


def _broken(root: Path, model_dir: Path, how: str) -> Path:
    path = tiny_lora(root / how, model_dir)
    config_file = path / "adapter_config.json"
    config = json.loads(config_file.read_text("utf-8"))
    if how == "no-weights":
        (path / "adapter_model.safetensors").unlink()
    elif how == "dora":
        config["use_dora"] = True
    elif how == "no-alpha":
        del config["lora_alpha"]
    elif how == "rank-pattern":  # a module's rank above the limit
        config["rank_pattern"] = {"q_proj": 32}
    config_file.write_text(json.dumps(config), "utf-8")
    return path


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("no-weights", "no-weights/adapter_model.safetensors: missing"),
        # rotor's own check: the file, the field and the limit
        ("rank16", "rank16/adapter_config.json: 'r' (the rank) is 16, above this engine's"),
        # vLLM's reasons, without its traceback
        ("dora", "vLLM cannot load the adapter: vLLM does not yet support DoRA."),
        ("no-alpha", "Missing required configuration fields: {'lora_alpha'}"),
        ("rank-pattern", "LoRA rank 32 is greater than max_lora_rank 8."),
    ],
)
def test_an_adapter_vllm_cannot_load_is_a_400_saying_why(
    server: Server,
    model_dir: Path,
    adapters: dict[str, Path],
    tmp_path: Path,
    how: str,
    says: str,
) -> None:
    path = adapters[how] if how in adapters else _broken(tmp_path, model_dir, how)
    r = load_lora(server, "broken", path)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert says in error["message"] and error["param"] == "lora_path", error
    assert "Traceback" not in error["message"]
    if how == "rank16":
        assert f"max_lora_rank {RANK}" in error["message"]
    assert "broken" not in listed(server)
    assert complete(server, "broken", [5, 6, 7]).status_code == 404


def test_a_missing_directory_is_a_400_naming_it(server: Server, tmp_path: Path) -> None:
    r = load_lora(server, "nowhere", tmp_path / "nowhere")
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert str(tmp_path / "nowhere") in error["message"] and error["param"] == "lora_path"


def test_unloading_an_adapter_in_use_lets_its_answer_finish_first(
    server: Server, adapters: dict[str, Path]
) -> None:
    """The DELETE answers at once and new requests are 404s; the running
    answer streams all its tokens; vLLM frees the adapter after."""
    assert load_lora(server, "third", adapters["third"]).status_code == 200
    prompt = server.tokenize(text=PROMPT)
    body = {"model": "third", "prompt": prompt, "temperature": 0, "max_tokens": 1000}
    body |= {"ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    chunks: list[dict[str, Any]] = []
    with httpx.stream("POST", server.v1 + "/completions", json=body, timeout=300) as r:
        assert r.status_code == 200
        lines = (line for line in r.iter_lines() if line.startswith("data: "))
        for line in lines:
            if line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: ") :]))
            if chunks and chunks[-1].get("choices"):
                break  # the first token: the adapter is in use
        gone = httpx.delete(server.v1 + "/loras/third", timeout=30)
        assert gone.status_code == 200, gone.text
        assert complete(server, "third", prompt).status_code == 404
        assert "third" not in listed(server)
        for line in lines:
            if line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: ") :]))
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
    assert finishes[-1] == "length" and finishes.count("length") == 1
    assert chunks[-1]["usage"]["completion_tokens"] == 1000
    assert all(c["model"] == "third" for c in chunks)
    # the engine deferred vLLM's removal when the DELETE came, and did it after
    wait_for("vLLM to remove 'third'", lambda: REMOVED.format("third") in server.log, 30)
    log = server.log
    assert log.index(DEFERRED.format("third")) < log.index(REMOVED.format("third"))
    # and the engine serves on
    assert complete(server, ADAPTER, prompt).status_code == 200


# -- the engine, not started ------------------------------------------------------


def _built(model_dir: Path, words: list[str], loras: list[tuple[str, str]]) -> Any:
    spec = engine_spec("vllm")
    card, tok = load(ModelConfig(model_path=str(model_dir)), spec)
    return build_engine(spec, card, tok, {"engine_args": [*VLLM_ARGS, *words], "loras": loras})


def test_lora_is_enabled_and_sized_for_the_startup_adapters_unless_the_user_sized_it(
    model_dir: Path, tmp_path: Path
) -> None:
    def sizes(words: list[str], *ranks: int) -> tuple[Any, ...]:
        loras = [
            (f"a{i}", str(write_adapter(tmp_path / f"r{r}-{i}", r))) for i, r in enumerate(ranks)
        ]
        args = _built(model_dir, words, loras).args
        return args.enable_lora, args.max_lora_rank, args.max_loras, args.max_cpu_loras

    assert not sizes([])[0]  # (vLLM leaves it None)
    assert sizes(["--enable-lora"]) == (True, 16, 1, 1)  # vLLM's default rank
    assert sizes([], 8) == (True, 8, 1, 1)
    assert sizes([], 8, 9, 4) == (True, 16, 3, 3)  # rounded up to a rank vLLM takes
    assert sizes([], 300) == (True, 320, 1, 1)
    assert sizes(["--max-lora-rank", "64", "--max-loras=2"], 8, 8, 8) == (True, 64, 2, 3)
    assert sizes(["--max-cpu-loras=5"], 8) == (True, 8, 1, 5)
    with pytest.raises(StartupError, match="rank 600 is above vLLM's largest max_lora_rank 512"):
        sizes([], 600)


@pytest.mark.asyncio
async def test_loading_without_lora_enabled_says_how_to_enable_it(model_dir: Path) -> None:
    engine = _built(model_dir, [], [])
    assert engine.adapters() == {}
    with pytest.raises(EngineError) as caught:
        await engine.load_adapter("x", str(model_dir))
    e = caught.value
    assert (e.kind, e.param) == ("refused", "lora_path")
    assert "--lora NAME=DIR" in e.message and "--enable-lora" in e.message


class FakeLLM:
    """AsyncLLM's LoRA calls, recorded in order (a stand-in: no engine)."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.fail = fail

    async def add_lora(self, request: Any) -> bool:
        if self.fail is not None:
            raise Exception(self.fail)  # how vLLM's engine core reports a failed call
        self.calls.append(("add", request.lora_int_id))
        return True

    async def remove_lora(self, lora_id: int) -> bool:
        self.calls.append(("remove", lora_id))
        return True

    async def reset_prefix_cache(self) -> bool:
        self.calls.append(("reset", 0))
        return True


@pytest.mark.asyncio
async def test_vllm_frees_an_unloaded_adapter_only_after_its_last_request(tmp_path: Path) -> None:
    loras = VLLMLoras(enabled=True, max_rank=8)
    llm = loras.llm = FakeLLM()
    await loras.load("a", str(write_adapter(tmp_path / "a")))
    await loras.load("b", str(write_adapter(tmp_path / "b")))
    assert llm.calls == [("add", 1), ("add", 2)] and loras.name_of(2) == "b"
    with loras.using("a") as first, loras.using("a") as second:
        assert first.lora_name == "a" and first.lora_int_id == 1 and second is first
        loras.unload("a")
        assert loras.names() == {"b": str(tmp_path / "b")}
        with pytest.raises(EngineError) as caught, loras.using("a"):
            pass
        assert caught.value.param == "model"
        await asyncio.sleep(0)
        assert ("remove", 1) not in llm.calls  # two requests still use it
    await asyncio.gather(*loras._removals)
    # freed, then the prefix cache reset: a later adapter of that name meets no old block
    assert llm.calls[-2:] == [("remove", 1), ("reset", 0)]
    loras.unload("b")  # unused: freed at once
    await asyncio.gather(*loras._removals)
    assert llm.calls[-2:] == [("remove", 2), ("reset", 0)]
    assert loras.name_of(1) == "a"  # late KV events of a freed adapter still name it


@pytest.mark.asyncio
async def test_vllm_s_reason_is_the_refusal_without_its_wrapping(tmp_path: Path) -> None:
    loras = VLLMLoras(enabled=True, max_rank=8)
    loras.llm = FakeLLM(
        "Call to add_lora method failed: Worker failed with error 'vLLM does not yet"
        " support DoRA.', please check the stack trace above for the root cause"
    )
    path = str(write_adapter(tmp_path / "dora"))
    with pytest.raises(EngineError) as caught:
        await loras.load("dora", path)
    e = caught.value
    assert (e.kind, e.param) == ("refused", "lora_path")
    assert e.message == (
        f"lora_path {path!r}: vLLM cannot load the adapter: vLLM does not yet support DoRA."
    )
    assert loras.names() == {}
