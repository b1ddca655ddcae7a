"""The store behind the Responses routes, in process (the echo engine over
the built-in model echoes the rendered prompt, so a turn's output is what
the model saw): a store that fails is a 503 and nothing says it was stored;
a tenant sees only its own responses; two frontends sharing a store
continue each other's chains and cancel each other's background responses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from rotor.api.responses.store import TENANT_SCOPE_KEY, MemoryStore, StoreUnavailable
from rotor.engines.echo import EchoEngine
from rotor.model.builtin import builtin_test_model

from support.app import app_over
from support.wait import wait_for_async


class BrokenStore(MemoryStore):
    """A store that cannot keep anything (reads work)."""

    async def put(self, tenant: str, response_id: str, record: bytes) -> None:
        raise StoreUnavailable("disk full")


def tenanted(app: Any) -> Callable[..., Any]:
    """The app, acting for the tenant an `x-tenant` header names (as the API-key middleware sets it)."""

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            for key, value in scope["headers"]:
                if key == b"x-tenant":
                    scope = {**scope, TENANT_SCOPE_KEY: value.decode()}
        await app(scope, receive, send)

    return asgi


@asynccontextmanager
async def frontend(
    store: Any, delay_ms: float = 0
) -> AsyncIterator[tuple[httpx.AsyncClient, EchoEngine]]:
    card, tok = builtin_test_model()
    engine = EchoEngine(card, tok, delay_ms)
    async with app_over(engine, response_store=store) as app:
        transport = httpx.ASGITransport(app=tenanted(app))
        async with httpx.AsyncClient(transport=transport, base_url="http://rotor") as http:
            yield http, engine


def text(body: dict[str, Any]) -> str:
    return "".join(p["text"] for item in body["output"] for p in item["content"])


@pytest.mark.parametrize(
    "body",
    [
        {"input": "hi"},
        {"input": "hi", "stream": True},
        {"input": "hi", "background": True},
    ],
)
async def test_a_store_that_fails_is_a_503_and_nothing_claims_it_was_kept(
    body: dict[str, Any],
) -> None:
    store = BrokenStore()
    async with frontend(store) as (http, engine):
        r = await http.post("/v1/responses", json=body)
        assert r.status_code == 503, r.text
        assert r.headers["content-type"].startswith("application/json")
        assert "disk full" in r.json()["error"]["message"]
        assert engine.state().active_requests == 0
        ok = await http.post("/v1/responses", json={**body, "store": False, "background": False})
        assert ok.status_code == 200, ok.text


async def test_a_tenant_sees_only_its_own_responses() -> None:
    async with frontend(MemoryStore()) as (http, _):
        made = await http.post("/v1/responses", json={"input": "hi"}, headers={"x-tenant": "a"})
        rid = made.json()["id"]
        assert (
            await http.get(f"/v1/responses/{rid}", headers={"x-tenant": "a"})
        ).status_code == 200
        for tenant in ({"x-tenant": "b"}, {}):
            r = await http.get(f"/v1/responses/{rid}", headers=tenant)
            assert r.status_code == 404 and rid in r.json()["error"]["message"]
            chained = {"input": "more", "previous_response_id": rid}
            r = await http.post("/v1/responses", json=chained, headers=tenant)
            assert (r.status_code, r.json()["error"]["param"]) == (404, "previous_response_id")
            r = await http.delete(f"/v1/responses/{rid}", headers=tenant)
            assert r.status_code == 404


async def test_a_chain_goes_on_at_another_frontend() -> None:
    store = MemoryStore()
    async with frontend(store) as (a, _), frontend(store) as (b, _):
        first = (
            await a.post(
                "/v1/responses", json={"input": "The cat sat.", "instructions": "Be terse."}
            )
        ).json()
        second = await b.post(
            "/v1/responses", json={"input": "What sat?", "previous_response_id": first["id"]}
        )
        assert second.status_code == 200, second.text
        seen = text(second.json())  # the prompt the second frontend rendered
        # ... is the one the whole conversation sent at once renders (no old instructions)
        whole = [
            {"role": "user", "content": "The cat sat."},
            {"role": "assistant", "content": text(first)},
            {"role": "user", "content": "What sat?"},
        ]
        stateless = await a.post("/v1/responses", json={"input": whole, "store": False})
        assert seen == text(stateless.json())
        assert seen.startswith("user\nThe cat sat.")


async def test_a_cancel_at_another_frontend_stops_the_response() -> None:
    store = MemoryStore()
    async with frontend(store, delay_ms=20) as (a, engine), frontend(store) as (b, _):
        made = (
            await a.post("/v1/responses", json={"input": "z" * 2000, "background": True})
        ).json()
        await wait_for_async("it to run", lambda: engine.state().active_requests == 1, timeout=10)
        r = await b.post(f"/v1/responses/{made['id']}/cancel")
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "cancelled"
        assert engine.state().active_requests == 0
        assert (await a.get(f"/v1/responses/{made['id']}")).json()["status"] == "cancelled"
        assert await store.get("", "cancel_" + made["id"]) is None  # the marker is gone


async def test_a_response_deleted_while_it_runs_stays_deleted() -> None:
    async with frontend(MemoryStore(), delay_ms=20) as (http, engine):
        made = (
            await http.post("/v1/responses", json={"input": "z" * 2000, "background": True})
        ).json()
        await wait_for_async("it to run", lambda: engine.state().active_requests == 1, timeout=10)
        assert (await http.delete(f"/v1/responses/{made['id']}")).json()["deleted"] is True
        assert engine.state().active_requests == 0
        assert (await http.get(f"/v1/responses/{made['id']}")).status_code == 404
