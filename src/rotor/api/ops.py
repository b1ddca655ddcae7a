"""Operations routes: `/health` (models and their engines; 503 until the
engines have started), `/live`, `/metrics`."""

from __future__ import annotations

import dataclasses

from fastapi import FastAPI
from starlette.responses import JSONResponse, Response

from rotor.api.metrics import Metrics
from rotor.frontend import Frontend


def register_ops(app: FastAPI, frontend: Frontend, metrics: Metrics) -> None:
    @app.get("/health")
    async def health() -> Response:
        ready = frontend.ready
        models = {
            e.model.name: dataclasses.asdict(e.engine.state()) for e in frontend.registry.entries()
        }
        body = {
            "status": "ok" if ready else "starting",
            "models": list(models),
            "engines": models,
        }
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/live")
    async def live() -> Response:
        return JSONResponse({"status": "live"})

    @app.get("/metrics")
    async def metrics_route() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
