"""Aborts on the wire between a real `rotor frontend` and a real `rotor
worker`: a choice the frontend ends itself (a stop string) sends the worker
exactly one abort; a request the engine ended sends none. Watched on the
worker's abort subject with a NATS client of the test's own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import nats as nats_py
import pytest

from rotor.protocol import codec
from rotor.runtime.nats import subjects

from support.cluster import Frontend, Nats, Worker, nats_server, start_frontend, start_worker
from support.wait import wait_for_async

pytestmark = pytest.mark.e2e

SCRIPT = "one two three four five six seven eight"
# A stop string early in a long answer from an engine at a real pace: the
# frontend ends the choice while the engine still runs it.
LONG = SCRIPT + " and so on" * 300


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Nats, Frontend, Worker]]:
    with nats_server() as nats:
        worker = start_worker(nats, "out=mocker", "--speedup-ratio", "1")
        frontend = start_frontend(nats)
        try:
            frontend.wait_workers("mock-model", {worker.id})
            yield nats, frontend, worker
        finally:
            frontend.proc.stop()
            worker.proc.stop()


def chat(frontend: Frontend, script: str = SCRIPT, **fields: object) -> dict:
    body = {
        "model": "mock-model",
        "messages": [{"role": "user", "content": "hi"}],
        "mock": {"output": script},
        "max_tokens": 4000,
        **fields,
    }
    r = httpx.post(frontend.v1 + "/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


async def test_one_abort_for_a_choice_the_frontend_ended_none_for_one_the_engine_ended(
    cluster: tuple[Nats, Frontend, Worker],
) -> None:
    """The worker's request and abort subjects, watched in the order the
    frontend published on them (one connection: its messages arrive in
    order), so each abort is counted against its request, and a request's
    missing abort is seen once the next request arrives."""
    nats, frontend, worker = cluster
    nc = await nats_py.connect(nats.url)
    seen: list[tuple[str, str]] = []  # ("generate" | "abort", engine request id)

    async def on_msg(msg: nats_py.aio.msg.Msg) -> None:
        if msg.subject == subjects.generate(worker.id):
            seen.append(("generate", codec.decode_request(msg.data).request_id))
        elif msg.subject == subjects.abort(worker.id):
            seen.append(("abort", msg.data.decode()))

    sub = await nc.subscribe(f"rotor.worker.{worker.id}.*", cb=on_msg)
    await nc.flush()
    try:
        by_engine = await asyncio.to_thread(chat, frontend)
        assert by_engine["choices"][0]["finish_reason"] == "stop"
        assert by_engine["choices"][0]["message"]["content"] == SCRIPT
        here = await asyncio.to_thread(chat, frontend, LONG, stop=["three"])
        assert here["choices"][0]["message"]["content"] == "one two "
        both = await asyncio.to_thread(chat, frontend, LONG, stop=["five"], n=2)
        assert [c["message"]["content"] for c in both["choices"]] == ["one two three four "] * 2
        await asyncio.to_thread(chat, frontend)  # its request closes the count of the others
        await wait_for_async(
            "five requests on the wire", lambda: sum(kind == "generate" for kind, _ in seen) == 5
        )
        requests = [rid for kind, rid in seen if kind == "generate"]
        aborts = {
            rid: sum(1 for kind, r in seen if kind == "abort" and r == rid) for rid in requests
        }
        assert [aborts[rid] for rid in requests[:4]] == [0, 1, 1, 1]
        assert all(kind == "generate" for kind, _ in seen[: seen.index(("generate", requests[1]))])
    finally:
        await sub.unsubscribe()
        await nc.close()
