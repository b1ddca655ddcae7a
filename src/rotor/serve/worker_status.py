"""A worker's `/live`, `/health` and `/metrics` on its `--system-port`: a
small HTTP server inside the worker's own asyncio program. `/live` answers
while the program runs (a container's liveness); `/health` is 200 only while
the worker serves (readiness: 503 once it drains)."""

from __future__ import annotations

import dataclasses

import uvicorn
from fastapi import FastAPI
from starlette.responses import JSONResponse, Response

from rotor import logs
from rotor.api.metrics import Metrics
from rotor.runtime.nats.worker import WorkerService
from rotor.serve.http import EmbeddedServer


def status_server(service: WorkerService, host: str, port: int) -> EmbeddedServer:
    engine = service.engine
    metrics = Metrics(lambda: [(engine.card.name, engine.state())])
    app = FastAPI(title="rotor worker")

    @app.get("/live")
    async def live() -> Response:
        return JSONResponse({"status": "live"})

    @app.get("/health")
    async def health() -> Response:
        lease = service.lease
        ok = lease.status == "serving"
        body = {
            "status": "ok" if ok else "leaving",
            "worker": service.worker_id,
            "model": lease.model,
            "address": lease.address,
            "engine": dataclasses.asdict(engine.state()),
        }
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics_route() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    config = uvicorn.Config(app, host=host, port=port, **logs.uvicorn_options("warning"))
    return EmbeddedServer(config)
