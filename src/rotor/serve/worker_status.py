"""A worker's `/live`, `/health` and `/metrics` on its `--system-port`.
`/health` is 200 only while the worker serves (readiness: 503 once it drains)."""

from __future__ import annotations

import dataclasses
from typing import Any

from rotor.api.lora import LoraControl, register_lora
from rotor.api.metrics import Metrics
from rotor.engines.base import Adapters
from rotor.runtime.nats.worker import WorkerService
from rotor.serve.http import EmbeddedServer
from rotor.serve.status import status_app
from rotor.serve.status import status_server as serve_status


def status_server(service: WorkerService, host: str, port: int) -> EmbeddedServer:
    engine = service.engine
    metrics = Metrics(lambda: [(engine.card.name, engine.state())])

    def health() -> tuple[dict[str, Any], int]:
        lease = service.lease
        ok = lease.status == "serving"
        body = {
            "status": "ok" if ok else "leaving",
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
    return serve_status(app, host, port)
