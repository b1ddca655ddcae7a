"""Operations routes: `/health` (models and their engines; 503 until the
engines have started), `/live`, `/metrics`."""

from __future__ import annotations

import dataclasses
import os

from fastapi import FastAPI
from starlette.responses import JSONResponse, Response

from rotor.api.metrics import PROMETHEUS_TEXT, Metrics
from rotor.api.openapi import route
from rotor.frontend import Frontend


def register_ops(app: FastAPI, frontend: Frontend, metrics: Metrics) -> None:
    @app.get("/health", **route("health"))
    async def health() -> Response:
        """200 when ready and every model it has served has something to serve it."""
        entries = frontend.registry.entries()
        down = [e.model.name for e in entries if not e.live()]
        body: dict[str, object] = {
            "status": "ok"
            if frontend.ready and not down
            else ("starting" if not frontend.ready else "degraded"),
            "models": [e.model.name for e in entries if e.live()],
            "engines": {e.model.name: dataclasses.asdict(e.engine.state()) for e in entries},
            "pid": os.getpid(),  # which process answered (--http-workers: one of N)
        }
        workers = {e.model.name: e.remote.describe() for e in entries if e.remote is not None}
        if workers:
            body["workers"] = workers
            body["pools"] = {e.model.name: e.remote.pools() for e in entries if e.remote}
            unhealthy = {e.model.name: e.remote.unhealthy() for e in entries if e.remote}
            if any(unhealthy.values()):  # workers whose engine failed its canary
                body["unhealthy"] = {model: ids for model, ids in unhealthy.items() if ids}
        if down:
            body["down"] = down
        ok = frontend.ready and not down
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/live", **route("live"))
    async def live() -> Response:
        return JSONResponse({"status": "live"})

    @app.get("/metrics", **route("metrics"))
    async def metrics_route() -> Response:
        return Response(metrics.render(), media_type=PROMETHEUS_TEXT)
