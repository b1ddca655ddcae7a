"""BareRoute: an endpoint that takes only the request is called without
FastAPI's request handler, yet keeps the app's exception handlers and its
place in the OpenAPI document; any other endpoint keeps FastAPI's handler."""

from __future__ import annotations

import fastapi.routing
import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from starlette.responses import JSONResponse, Response

from rotor.api.bare_route import BareRoute


class Refused(Exception):
    pass


def build() -> FastAPI:
    app = FastAPI()
    app.router.route_class = BareRoute

    @app.exception_handler(Refused)
    async def _refused(request: Request, exc: Refused) -> Response:
        return JSONResponse({"error": str(exc)}, status_code=400)

    @app.post("/echo")
    async def echo(request: Request) -> Response:
        return Response(await request.body())

    @app.get("/ping")
    async def ping() -> Response:
        return JSONResponse({"pong": True})

    @app.post("/refuse")
    async def refuse(request: Request) -> Response:
        raise Refused("no")

    @app.get("/items/{item_id}")
    async def item(item_id: int) -> Response:
        return JSONResponse({"id": item_id})

    return app


def test_request_only_endpoints_skip_fastapis_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    solve = fastapi.routing.solve_dependencies

    async def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append("solve")
        return await solve(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counting)
    with TestClient(build()) as client:
        assert client.post("/echo", content=b"abc").content == b"abc"
        assert client.get("/ping").json() == {"pong": True}
        assert calls == []  # neither went through dependency solving
        # A path parameter needs FastAPI: that route keeps its handler (and validation).
        assert client.get("/items/3").json() == {"id": 3}
        assert calls == ["solve"]
        assert client.get("/items/x").status_code == 422


def test_exceptions_of_a_bare_endpoint_reach_the_apps_handlers() -> None:
    with TestClient(build()) as client:
        r = client.post("/refuse")
        assert r.status_code == 400 and r.json() == {"error": "no"}


def test_bare_routes_stay_in_the_openapi_document() -> None:
    with TestClient(build()) as client:
        paths = client.get("/openapi.json").json()["paths"]
    assert {"/echo", "/ping", "/refuse", "/items/{item_id}"} <= set(paths)
    assert paths["/items/{item_id}"]["get"]["parameters"][0]["name"] == "item_id"
