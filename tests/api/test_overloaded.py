"""A request that every worker is too loaded for (router/overload.py) is
refused before any byte of a stream: 503 with Retry-After by default, 529
with `--overload-status 529` (Anthropic's "overloaded", Dynamo's default),
in each API's envelope, counted in `rotor_router_overloaded_total` and in
the requests' status label; a worker that fails its canary is named in
/health and counted in `rotor_router_unhealthy_workers`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rotor.api.app import create_app
from rotor.api.errors import client_error
from rotor.frontend import Frontend
from rotor.model.builtin import builtin_test_model
from rotor.pipeline.events import Failure
from rotor.pipeline.served import ServedModel
from rotor.router.modes import RoundRobin
from rotor.router.overload import Overload
from rotor.router.pool import Pool

from support.link import FakeLink
from support.workers import lease

CARD, TOK = builtin_test_model()
MODEL = CARD.name
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def full_pool() -> Pool:
    """Three workers, each with 95 of its 100 KV blocks in use; "c" unhealthy."""
    pool = Pool(CARD, FakeLink(), RoundRobin(), overload=Overload(max_kv_usage=0.9))
    for wid in ("a", "b", "c"):
        worker = lease(wid, kv_blocks_total=100, kv_blocks_free=5)
        worker.model = MODEL
        worker.healthy = wid != "c"
        pool.upsert(worker)
    return pool


@asynccontextmanager
async def client(pool: Pool, **kw: int) -> AsyncIterator[httpx.AsyncClient]:
    frontend = Frontend()
    frontend.registry.add(ServedModel.build(CARD, TOK), pool)
    app = create_app(frontend, **kw)  # type: ignore[arg-type]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rotor") as http:
            yield http


def samples(text: str, name: str) -> dict[str, float]:
    return {
        str(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    }


@pytest.mark.parametrize("status", [None, 503, 529])
async def test_every_worker_overloaded_is_a_refusal_with_retry_after(status: int | None) -> None:
    pool = full_pool()
    async with client(pool, **({} if status is None else {"overload_status": status})) as http:
        for stream in (False, True):
            r = await http.post("/v1/chat/completions", json={**CHAT, "stream": stream})
            assert r.status_code == (status or 503), r.text
            assert r.headers["retry-after"] == "1"
            error = r.json()["error"]
            assert "overloaded" in error["message"] and error["type"] == "overloaded_error"
        r = await http.post(
            "/v1/messages", json={**CHAT, "max_tokens": 4}, headers={"anthropic-version": "1"}
        )
        assert r.status_code == (status or 503)
        assert r.json()["error"]["type"] == "overloaded_error"  # Anthropic's envelope
        health = (await http.get("/health")).json()
        assert health["unhealthy"] == {MODEL: ["c"]}
        assert [w["id"] for w in health["workers"][MODEL]] == ["a", "b"]
        text = (await http.get("/metrics")).text
    assert pool.stats.overloaded == 3
    assert samples(text, "rotor_router_overloaded_total") == {str([("model", MODEL)]): 3}
    assert samples(text, "rotor_router_unhealthy_workers") == {str([("model", MODEL)]): 1}
    refused = samples(text, "rotor_requests_total")
    assert sum(refused.values()) == 3 and all(f"'{status or 503}'" in k for k in refused)


def test_only_an_overload_takes_the_overload_status() -> None:
    def make(cause: str | None) -> Failure:
        return Failure("unavailable", "m", None, cause)

    overloaded = client_error(make("overloaded"), None, 529)
    assert (overloaded.status, overloaded.headers) == (529, {"retry-after": "1"})
    for cause in ("no_worker", "unhealthy", None):
        other = client_error(make(cause), None, 529)
        assert (other.status, other.headers) == (503, {"retry-after": "1"})
