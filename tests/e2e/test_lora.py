"""LoRA adapters in `rotor run` (the mocker): `--lora NAME=DIR` at start,
`/v1/loras` (and vLLM's load/unload routes) at run time behind `--api-key`;
each adapter a model with its base as `parent`; its answers its own; a bad
directory a 400 naming the file; an unloaded adapter's running answer
finishes. The vLLM engine's adapters: tests/vllm/test_vllm_lora.py; over
NATS: test_lora_cluster.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from support.adapters import write_adapter
from support.server import Server, rotor_server

KEY = "lora-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MODEL = "mock-model"
# one server (fleet) for the module, its tests in order


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("adapters")
    for name in ("sql", "chat", "later"):
        write_adapter(root / name)
    return root


@pytest.fixture(scope="module")
def server(adapters: Path) -> Iterator[Server]:
    # speedup 1: a 300-token answer takes ~3 s, long enough to unload its adapter meanwhile
    with rotor_server(
        "out=mocker", "--api-key", KEY, "--lora", f"sql={adapters / 'sql'}",
        "--lora-load-ms", "0",
    ) as srv:  # fmt: skip
        yield srv


def client(server: Server) -> openai.OpenAI:
    return server.openai(api_key=KEY)


def complete(server: Server, model: str, **extra: object) -> httpx.Response:
    body = {"model": model, "prompt": "SELECT", "max_tokens": 8, "seed": 7, **extra}
    return httpx.post(server.v1 + "/completions", json=body, headers=AUTH, timeout=30)


def load(server: Server, name: str, path: object) -> httpx.Response:
    body = {"lora_name": name, "lora_path": str(path)}
    return httpx.post(server.v1 + "/loras", json=body, headers=AUTH, timeout=30)


def test_a_startup_adapter_is_a_model_with_its_base_as_parent(server: Server) -> None:
    listed = {m.id: m.model_extra for m in client(server).models.list().data}
    assert listed[MODEL]["parent"] is None
    assert listed["sql"]["parent"] == MODEL
    assert listed["sql"]["root"].endswith("/sql")  # vLLM's: the adapter's directory
    one = httpx.get(server.v1 + "/models/sql", headers=AUTH, timeout=5).json()
    assert one["id"] == "sql" and one["parent"] == MODEL
    loras = httpx.get(server.v1 + "/loras", headers=AUTH, timeout=5).json()
    assert [(e["id"], e["parent"]) for e in loras["data"]] == [("sql", MODEL)]


def test_an_adapter_s_answer_is_its_own_and_the_same_each_time(server: Server) -> None:
    """The mocker's seeded output under an adapter differs from the base
    model's, deterministically; the response names the adapter."""
    base, first, again = (complete(server, m).json() for m in (MODEL, "sql", "sql"))
    assert first["model"] == "sql"
    assert first["choices"][0]["text"] == again["choices"][0]["text"]
    assert first["choices"][0]["text"] != base["choices"][0]["text"]
    chat = client(server).chat.completions.create(
        model="sql", messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    assert chat.model == "sql" and chat.usage.completion_tokens >= 1


def test_load_use_and_unload_at_run_time(server: Server, adapters: Path) -> None:
    r = load(server, "chat", adapters / "chat")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "id": "chat",
        "object": "lora",
        "path": str(adapters / "chat"),
        "parent": MODEL,
    }
    assert complete(server, "chat").json()["model"] == "chat"
    assert "chat" in {m.id for m in client(server).models.list().data}
    again = load(server, "chat", adapters / "chat")
    assert again.status_code == 400 and "already loaded" in again.json()["error"]["message"]
    gone = httpx.delete(server.v1 + "/loras/chat", headers=AUTH, timeout=5)
    assert gone.status_code == 200 and gone.json()["deleted"] is True
    after = complete(server, "chat")
    assert after.status_code == 404 and "'chat' does not exist" in after.text
    assert httpx.delete(server.v1 + "/loras/chat", headers=AUTH, timeout=5).status_code == 404


def test_vllm_s_own_routes_load_and_unload(server: Server, adapters: Path) -> None:
    body = {"lora_name": "later", "lora_path": str(adapters / "later")}
    r = httpx.post(server.v1 + "/load_lora_adapter", json=body, headers=AUTH, timeout=30)
    assert r.status_code == 200 and "later" in r.text
    assert complete(server, "later").status_code == 200
    r = httpx.post(
        server.v1 + "/unload_lora_adapter", json={"lora_name": "later"}, headers=AUTH, timeout=5
    )
    assert r.status_code == 200
    assert complete(server, "later").status_code == 404


def _broken(root: Path, how: str) -> Path:
    path = write_adapter(root / how)
    if how == "no-config":
        (path / "adapter_config.json").unlink()
    elif how == "config-not-json":
        (path / "adapter_config.json").write_text("{not json")
    elif how == "no-rank":
        (path / "adapter_config.json").write_text(json.dumps({"target_modules": ["q_proj"]}))
    elif how == "no-weights":
        (path / "adapter_model.safetensors").unlink()
    elif how == "weights-not-safetensors":
        (path / "adapter_model.safetensors").write_bytes(b"\x00" * 3)
    return path


@pytest.mark.parametrize(
    ("how", "names"),
    [
        ("no-config", "adapter_config.json: missing"),
        ("config-not-json", "adapter_config.json: not JSON"),
        ("no-rank", "adapter_config.json: 'r'"),
        ("no-weights", "adapter_model.safetensors: missing"),
        ("weights-not-safetensors", "adapter_model.safetensors: not a safetensors file"),
    ],
)
def test_a_malformed_adapter_is_a_400_naming_the_file(
    server: Server, tmp_path: Path, how: str, names: str
) -> None:
    r = load(server, "broken", _broken(tmp_path, how))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert names in error["message"] and error["param"] == "lora_path"
    assert "broken" not in {m.id for m in client(server).models.list().data}


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"lora_name": "x", "lora_path": "/no/such/dir"}, "lora_path", "no such directory"),
        ({"lora_name": "x"}, "lora_path", "lora_path"),
        ({"lora_name": "x", "lora_path": "/tmp", "rank": 8}, "rank", "rank"),
        ({"lora_name": "a b", "lora_path": "/tmp"}, "lora_name", "lora_name 'a b'"),
        ({"lora_name": MODEL, "lora_path": "/tmp"}, "lora_name", "the model's own name"),
    ],
)
def test_a_bad_load_request_is_a_400_naming_the_field(
    server: Server, body: dict, param: str, says: str
) -> None:
    r = httpx.post(server.v1 + "/loras", json=body, headers=AUTH, timeout=5)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and says in r.json()["error"]["message"]


def test_the_routes_need_the_api_key(server: Server, adapters: Path) -> None:
    body = {"lora_name": "chat", "lora_path": str(adapters / "chat")}
    assert httpx.post(server.v1 + "/loras", json=body, timeout=5).status_code == 401
    assert httpx.get(server.v1 + "/loras", timeout=5).status_code == 401
    assert httpx.delete(server.v1 + "/loras/sql", timeout=5).status_code == 401
    assert complete(server, "sql").status_code == 200  # still loaded


def test_unloading_an_adapter_in_use_lets_its_answer_finish(server: Server, adapters: Path) -> None:
    """The answer streams on to its last token after the DELETE; new
    requests for the adapter are 404s at once."""
    assert load(server, "chat", adapters / "chat").status_code == 200
    stream = client(server).completions.create(
        model="chat",
        prompt="go",
        max_tokens=300,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = iter(stream)
    first = next(chunks)
    assert first.model == "chat"
    gone = httpx.delete(server.v1 + "/loras/chat", headers=AUTH, timeout=5)
    assert gone.status_code == 200
    assert complete(server, "chat").status_code == 404
    rest = list(chunks)
    assert rest, "the answer ended before its adapter was unloaded"
    assert [c.choices[0].finish_reason for c in rest if c.choices][-1] == "length"
    assert rest[-1].usage is not None and rest[-1].usage.completion_tokens == 300


def test_http_workers_serve_startup_adapters_and_say_why_they_cannot_load(
    adapters: Path,
) -> None:
    with rotor_server(
        "out=mocker", "--speedup-ratio", "0", "--http-workers", "2",
        "--lora", f"sql={adapters / 'sql'}",
    ) as srv:  # fmt: skip
        for _ in range(4):  # whichever process answers
            r = httpx.post(
                srv.v1 + "/completions",
                json={"model": "sql", "prompt": "x", "max_tokens": 2},
                timeout=30,
            )
            assert r.status_code == 200 and r.json()["model"] == "sql"
        r = httpx.post(
            srv.v1 + "/loras", json={"lora_name": "chat", "lora_path": "/tmp"}, timeout=5
        )
        assert r.status_code == 400 and "only at start" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["out=mocker", "--lora", "x=/no/such/dir"], "--lora x=/no/such/dir: lora_path"),
        (["out=echo", "--lora", "x=/tmp"], "this engine cannot load LoRA adapters"),
        (["out=mocker", "--lora", "x"], "expected NAME=DIR"),
    ],
)
def test_a_bad_startup_adapter_stops_rotor_run_saying_why(
    args: list[str], says: str, adapters: Path
) -> None:
    args = [a.replace("/tmp", str(adapters / "sql")) for a in args]
    done = subprocess.run(
        [sys.executable, "-m", "rotor.cli", "run", *args, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stdout + done.stderr
