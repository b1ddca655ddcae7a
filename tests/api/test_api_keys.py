"""`--api-key` given several times (api/auth.py): any of the keys is let in,
each is a tenant of its own (a digest in the request's scope, never the key:
what stored responses are kept under), and a wrong key is a 401 whatever
the others are."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from rotor.api.app import create_app
from rotor.api.auth import APIKeyMiddleware, tenant_of_key
from rotor.api.responses.store import TENANT_SCOPE_KEY, tenant_of
from rotor.engines.echo import EchoEngine
from rotor.frontend import Frontend
from rotor.model.card import ModelCard
from rotor.pipeline.served import ServedModel

KEYS = ["key-of-alice", "key-of-bob"]


async def tenant_echo(scope: Scope, receive: Receive, send: Send) -> None:
    """What the routes behind the middleware see: the request's tenant."""
    body = tenant_of(scope).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def behind(keys: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = APIKeyMiddleware(tenant_echo, api_key=keys)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rotor") as http:
        yield http


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_each_key_is_let_in_as_a_tenant_of_its_own() -> None:
    async with behind(KEYS) as http:
        alice = await http.get("/v1/models", headers=bearer(KEYS[0]))
        bob = await http.get("/v1/models", headers={"x-api-key": KEYS[1]})
        again = await http.get("/v1/responses/x", headers=bearer(KEYS[0]))
    assert alice.status_code == bob.status_code == again.status_code == 200
    assert alice.text != bob.text
    assert alice.text == again.text == tenant_of_key(KEYS[0])
    assert bob.text == tenant_of_key(KEYS[1])
    for tenant, key in ((alice.text, KEYS[0]), (bob.text, KEYS[1])):
        assert len(tenant) == 32 and int(tenant, 16) >= 0
        assert key not in tenant


async def test_a_wrong_key_is_refused_whatever_the_others() -> None:
    async with behind(KEYS) as http:
        for headers in (bearer("key-of-eve"), bearer(KEYS[0] + KEYS[1]), bearer(""), {}):
            r = await http.get("/v1/models", headers=headers)
            assert r.status_code == 401, headers
            assert r.json()["error"]["message"] == "invalid or missing API key"
        open_path = await http.get("/health")
    assert open_path.status_code == 200
    assert open_path.text == ""  # no key asked for, no tenant set


async def test_one_key_as_a_string_still_works() -> None:
    async with behind("only") as http:
        assert (await http.get("/v1/models", headers=bearer("only"))).text == tenant_of_key("only")
        assert (await http.get("/v1/models", headers=bearer("other"))).status_code == 401


@pytest.mark.parametrize("keys", [[], [""], ["a", ""], ""])
def test_no_key_or_an_empty_one_is_refused(keys: Any) -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        APIKeyMiddleware(tenant_echo, api_key=keys)


def test_the_tenant_is_the_same_digest_everywhere() -> None:
    """Every frontend (and a restarted one) finds the same tenant's records."""
    assert tenant_of_key("k") == tenant_of_key("k") != tenant_of_key("K")
    assert TENANT_SCOPE_KEY == "rotor.tenant"


async def test_the_app_takes_several_keys() -> None:
    card = ModelCard("echo")
    frontend = Frontend()
    frontend.registry.add(ServedModel.build(card, None), EchoEngine(card))
    app = create_app(frontend, api_key=KEYS)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rotor") as http:
            for key in KEYS:
                assert (await http.get("/v1/models", headers=bearer(key))).status_code == 200
            assert (await http.get("/v1/models", headers=bearer("nope"))).status_code == 401
            spec = (await http.get("/openapi.json")).json()
    assert "bearer" in spec["components"]["securitySchemes"]
