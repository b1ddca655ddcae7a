"""A worker's `/live`, `/health` and `/metrics` on its `--system-port`.
`/health` is 200 only while the worker serves and its engine answers its
canary (readiness: 503 once it drains, or while its engine is wedged).

The fault switch of an engine that has one (engines/base.Wedge: the
mocker), for fault tests and benchmarks (docs/cli.md#the-wedge-switch):
`POST /debug/wedge` with `{"seconds": S}` (or no body: until switched off)
stops the engine's steps, `DELETE /debug/wedge` starts them again, `GET
/debug/wedge` says whether it is wedged. Another engine answers 501."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import orjson
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from rotor.api.errors import error_response
from rotor.api.lora import LoraControl, register_lora
from rotor.api.metrics import Metrics
from rotor.engines.base import Adapters, Engine, Wedge
from rotor.runtime.nats.worker import WorkerService
from rotor.serve.http import EmbeddedServer
from rotor.serve.status import status_app
from rotor.serve.status import status_server as serve_status

WEDGE_PATH = "/debug/wedge"
MAX_WEDGE_BODY = 1024


def status_server(service: WorkerService, host: str, port: int) -> EmbeddedServer:
    engine = service.engine
    metrics = Metrics(lambda: [(engine.card.name, engine.state())])

    def health() -> tuple[dict[str, Any], int]:
        lease = service.lease
        ok = lease.status == "serving" and lease.healthy
        status = "ok" if ok else ("leaving" if lease.status == "leaving" else "unhealthy")
        body = {
            "status": status,
            "worker": service.worker_id,
            "model": lease.model,
            "address": lease.address,
            "engine": dataclasses.asdict(engine.state()),
        }
        return body, 200 if ok else 503

    app = status_app("rotor worker", health, metrics.render)
    loader = engine if isinstance(engine, Adapters) else None
    why = f"the {engine.card.name!r} engine cannot load LoRA adapters"
    register_lora(app, LoraControl(engine.card.name, loader, why, service.adapters_changed))
    register_wedge(app, engine)
    return serve_status(app, host, port)


def register_wedge(app: FastAPI, engine: Engine) -> None:
    """`/debug/wedge`: the engine's fault switch (501 for an engine without one)."""

    def switch() -> Wedge | Response:
        if isinstance(engine, Wedge):
            return engine
        why = f"the engine of {engine.card.name!r} has no wedge switch (the mocker has)"
        return error_response(501, why)

    def state(wedge: Wedge) -> dict[str, Any]:
        left = wedge.wedged()
        seconds = None if left is None or math.isinf(left) else round(left, 3)
        return {"wedged": left is not None, "seconds_left": seconds}

    @app.get(WEDGE_PATH)
    async def wedged() -> Response:
        wedge = switch()
        return wedge if isinstance(wedge, Response) else JSONResponse(state(wedge))

    @app.post(WEDGE_PATH)
    async def wedge_route(request: Request) -> Response:
        wedge = switch()
        if isinstance(wedge, Response):
            return wedge
        raw = await request.body()
        if len(raw) > MAX_WEDGE_BODY:
            return error_response(413, f"a wedge's body is at most {MAX_WEDGE_BODY} bytes")
        seconds = _seconds(raw)
        if seconds is None:
            why = 'expected {"seconds": S}, S >= 0 (0 or none: until DELETE /debug/wedge)'
            return error_response(400, why, "seconds")
        wedge.wedge(seconds)
        return JSONResponse(state(wedge))

    @app.delete(WEDGE_PATH)
    async def unwedge() -> Response:
        wedge = switch()
        if isinstance(wedge, Response):
            return wedge
        wedge.unwedge()
        return JSONResponse(state(wedge))


def _seconds(raw: bytes) -> float | None:
    """A wedge's time from its body (no body, no field: 0, until switched
    off); None when the body is not `{"seconds": S}` with S >= 0."""
    try:
        body = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        return None
    seconds = body.get("seconds", 0) if isinstance(body, dict) else None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return None
    return float(seconds) if 0 <= seconds < math.inf else None
