"""LoRA adapters over NATS: a real nats-server, two mocker workers (one
started with `--lora`), and two frontends (round robin, and KV routing).
A worker's lease lists its adapters; frontends serve each as a model and
route its requests only to workers that hold it; `/v1/loras` on a worker's
`--system-port` loads and unloads at run time; the KV block hash includes the
adapter, so a prefix cached for the base model is no overlap for the
adapter; an adapter whose only holder died is a 503 with Retry-After."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from support.adapters import write_adapter
from support.cluster import Frontend, Nats, Worker, nats_server, start_frontend, start_worker
from support.wait import wait_for

MODEL = "mock-model"


@dataclass
class Fleet:
    nats: Nats
    holder: Worker  # started with --lora sql
    other: Worker
    rr: Frontend  # --router round_robin
    kv: Frontend  # --router kv
    adapters: Path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("adapters")
    sql = write_adapter(root / "sql")
    with nats_server() as nats:
        common = ("out=mocker", "--speedup-ratio", "0", "--lora-load-ms", "0")
        holder = start_worker(nats, *common, "--lora", f"sql={sql}", system=True)
        other = start_worker(nats, *common, system=True)
        rr = start_frontend(nats, "--router", "round_robin")
        kv = start_frontend(nats, "--router", "kv")
        try:
            for frontend in (rr, kv):
                frontend.wait_workers(MODEL, {holder.id, other.id})
            yield Fleet(nats, holder, other, rr, kv, root)
        finally:
            for proc in (rr.proc, kv.proc, holder.proc, other.proc):
                proc.stop()


def complete(frontend: Frontend, model: str, prompt: str = "x") -> httpx.Response:
    body = {"model": model, "prompt": prompt, "max_tokens": 2}
    return httpx.post(frontend.v1 + "/completions", json=body, timeout=30)


def listed(frontend: Frontend) -> dict[str, dict]:
    return {m["id"]: m for m in httpx.get(frontend.v1 + "/models", timeout=5).json()["data"]}


def loras(worker: Worker, method: str, path: str = "", **body: str) -> httpx.Response:
    assert worker.system_url is not None
    url = worker.system_url + "/v1/loras" + path
    return httpx.request(method, url, json=body or None, timeout=30)


def test_an_adapter_s_life_across_the_fleet(fleet: Fleet) -> None:
    """One scenario, its steps in order (each starts from the state the last
    one left): held by one worker, routed there alone and hashed apart; loaded
    on the other at run time; unloaded everywhere; its last holder killed."""
    frontends_serve_a_worker_s_adapter_as_a_model(fleet)
    an_adapter_s_requests_go_only_to_its_holders(fleet)
    a_base_prefix_is_no_overlap_for_the_adapter(fleet)
    loading_on_a_worker_s_system_port_adds_a_holder(fleet)
    unloading_everywhere_makes_it_unknown(fleet)
    an_adapter_whose_holders_died_is_a_503_with_retry_after(fleet)


def frontends_serve_a_worker_s_adapter_as_a_model(fleet: Fleet) -> None:
    for frontend in (fleet.rr, fleet.kv):
        models = listed(frontend)
        assert models["sql"]["parent"] == MODEL and models[MODEL]["parent"] is None
    held = loras(fleet.holder, "GET").json()["data"]
    assert [(e["id"], e["parent"]) for e in held] == [("sql", MODEL)]
    assert loras(fleet.other, "GET").json()["data"] == []


def an_adapter_s_requests_go_only_to_its_holders(fleet: Fleet) -> None:
    base = {complete(fleet.rr, MODEL).headers["x-rotor-worker"] for _ in range(4)}
    assert base == {fleet.holder.id, fleet.other.id}  # round robin over both
    for _ in range(6):
        r = complete(fleet.rr, "sql")
        assert r.status_code == 200 and r.json()["model"] == "sql"
        assert r.headers["x-rotor-worker"] == fleet.holder.id


def a_base_prefix_is_no_overlap_for_the_adapter(fleet: Fleet) -> None:
    """KV routing: the same long prompt, cached for the base model, matches
    no block under the adapter; cached under the adapter, it matches there."""
    prompt = "the volcanoes of Iceland " * 40
    first = complete(fleet.kv, MODEL, prompt)
    assert first.status_code == 200

    def base_cached() -> bool:
        return int(complete(fleet.kv, MODEL, prompt).headers["x-rotor-kv-overlap"]) > 0

    wait_for("the base prompt's blocks in the KV index", base_cached, 10)
    under = complete(fleet.kv, "sql", prompt)
    assert under.status_code == 200
    assert int(under.headers["x-rotor-kv-overlap"]) == 0

    def adapter_cached() -> bool:
        return int(complete(fleet.kv, "sql", prompt).headers["x-rotor-kv-overlap"]) > 0

    wait_for("the adapter's blocks in the KV index", adapter_cached, 10)


def loading_on_a_worker_s_system_port_adds_a_holder(fleet: Fleet) -> None:
    path = write_adapter(fleet.adapters / "chat")
    r = loras(fleet.other, "POST", lora_name="chat", lora_path=str(path))
    assert r.status_code == 200, r.text
    wait_for("the frontend to serve chat", lambda: "chat" in listed(fleet.rr), 10)
    for _ in range(4):
        assert complete(fleet.rr, "chat").headers["x-rotor-worker"] == fleet.other.id
    bad = loras(fleet.other, "POST", lora_name="bad", lora_path=str(fleet.adapters / "nope"))
    assert bad.status_code == 400 and "no such directory" in bad.json()["error"]["message"]
    # now both hold sql: round robin spreads it
    r = loras(fleet.other, "POST", lora_name="sql", lora_path=str(fleet.adapters / "sql"))
    assert r.status_code == 200, r.text

    def both() -> bool:
        return {complete(fleet.rr, "sql").headers["x-rotor-worker"] for _ in range(4)} == {
            fleet.holder.id,
            fleet.other.id,
        }

    wait_for("sql on both workers", both, 10)


def unloading_everywhere_makes_it_unknown(fleet: Fleet) -> None:
    assert loras(fleet.other, "DELETE", "/chat").status_code == 200
    wait_for("chat to leave /v1/models", lambda: "chat" not in listed(fleet.rr), 10)
    r = complete(fleet.rr, "chat")
    assert r.status_code == 404 and "'chat' does not exist" in r.text


def an_adapter_whose_holders_died_is_a_503_with_retry_after(fleet: Fleet) -> None:
    """It ends both workers' hold on sql (one unloads, one dies)."""
    assert loras(fleet.other, "DELETE", "/sql").status_code == 200

    def only_holder() -> bool:
        return {complete(fleet.rr, "sql").headers["x-rotor-worker"] for _ in range(3)} == {
            fleet.holder.id
        }

    wait_for("sql on its first worker only", only_holder, 10)
    fleet.holder.proc.kill()
    fleet.rr.wait_workers(MODEL, {fleet.other.id})
    r = complete(fleet.rr, "sql")
    assert r.status_code == 503, r.text
    assert "Retry-After" in r.headers
    assert "no live worker serves the LoRA adapter 'sql'" in r.json()["error"]["message"]
    assert complete(fleet.rr, MODEL).status_code == 200  # the base model still serves
