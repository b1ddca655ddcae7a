"""The `/live`, `/health` and `/metrics` a long-running rotor program (a
worker, the planner) serves on its `--system-port`: a small HTTP server
inside the program's own asyncio loop. `/live` answers while the program
runs (a container's liveness); `/health` says what the program reports, with
the status code it picks (readiness)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI
from starlette.responses import JSONResponse, Response

from rotor import logs
from rotor.api.metrics import PROMETHEUS_TEXT
from rotor.serve.http import EmbeddedServer

Health = Callable[[], tuple[dict[str, Any], int]]  # the body and its status code


def status_app(title: str, health: Health, render_metrics: Callable[[], bytes]) -> FastAPI:
    app = FastAPI(title=title)

    @app.get("/live")
    async def live() -> Response:
        return JSONResponse({"status": "live"})

    @app.get("/health")
    async def health_route() -> Response:
        body, code = health()
        return JSONResponse(body, status_code=code)

    @app.get("/metrics")
    async def metrics_route() -> Response:
        return Response(render_metrics(), media_type=PROMETHEUS_TEXT)

    return app


def status_server(app: FastAPI, host: str, port: int) -> EmbeddedServer:
    """The app on host:port, without signal handlers of its own (the program has them)."""
    config = uvicorn.Config(app, host=host, port=port, **logs.uvicorn_options("warning"))
    return EmbeddedServer(config)
