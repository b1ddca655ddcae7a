"""`rotor worker`: build the engine (the same load / build steps as `rotor
run`), register it on NATS with its canary (`--canary-after`), serve until
SIGTERM, then withdraw, drain, stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from nats.aio.client import Client

from rotor import event_loop, logs, tracing
from rotor.config import WorkerConfig
from rotor.engines.base import Engine, Lifecycle
from rotor.engines.registry import engine_spec
from rotor.model.tokenizer import Tokenizer
from rotor.runtime.canary import Canary
from rotor.runtime.nats.connect import connect
from rotor.runtime.nats.worker import CardConflict, WorkerIdentity, WorkerService
from rotor.serve.build import (
    StartupError,
    build_engine,
    check_adapter_engine,
    check_adapters,
    engine_options,
    load,
    serve_model,
)
from rotor.serve.gc import settle
from rotor.serve.http import EmbeddedServer
from rotor.serve.system import load_startup_adapter
from rotor.serve.worker_status import status_server

log = logging.getLogger("rotor.worker")


def build(config: WorkerConfig) -> tuple[Engine, Tokenizer | None]:
    """The engine, its card carrying the parser choice (frontends read it there)."""
    spec = engine_spec(config.engine.name)
    card, tok = load(config.model, spec)
    check_adapters(config.model)
    # the engine knows its role (vLLM configures its KV connector by it)
    options = {**engine_options(config.engine, config.model), "disaggregation_mode": config.role}
    engine = build_engine(spec, card, tok, options)
    check_adapter_engine(config.model, engine)
    served = serve_model(config.model, engine.card, tok)
    engine.card.tool_call_parser = served.tool_parser
    engine.card.reasoning_parser = served.reasoning_parser
    return engine, tok


def run_worker(config: WorkerConfig) -> int:
    logs.setup(config.log_level, config.log_format)
    try:
        problem = tracing.missing(config.otlp_endpoint)
        if problem is not None:
            raise StartupError(problem)
        engine, tok = build(config)
    except StartupError as e:
        logs.say(str(e), logging.ERROR)
        return 2
    return event_loop.run(_serve(engine, tok, config))


async def _serve(engine: Engine, tok: Tokenizer | None, config: WorkerConfig) -> int:
    """Start, serve until SIGTERM/SIGINT, leave. A signal during startup
    (NATS not there yet, say) stops it there, at once."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    worker = _Worker(engine, tok, config)
    startup = asyncio.ensure_future(worker.start())
    told = asyncio.ensure_future(stop.wait())
    await asyncio.wait({startup, told}, return_when=asyncio.FIRST_COMPLETED)
    if not startup.done():
        startup.cancel()
        await asyncio.gather(startup, return_exceptions=True)
        logs.say(f"worker for {engine.card.name!r} stopped before it was serving")
        await worker.close()
        return 0
    told.cancel()
    try:
        service = startup.result()
    except (CardConflict, StartupError) as e:
        logs.say(str(e), logging.ERROR)
        await worker.close()
        return 2
    role = "" if config.role == "agg" else f" ({config.role})"
    logs.say(f"worker {service.worker_id} serves {engine.card.name!r}{role} on {config.nats}")
    await stop.wait()
    logs.say(f"worker {service.worker_id} is leaving")
    await service.withdraw()
    await service.drain(config.grace_period)
    await worker.close()
    return 0


class _Worker:
    """What a worker process runs, started step by step (`start`) and closed
    whatever step it reached (`close`)."""

    def __init__(self, engine: Engine, tok: Tokenizer | None, config: WorkerConfig) -> None:
        self.engine = engine
        self.tok = tok
        self.config = config
        self.nc: Client | None = None
        self.engine_started = False
        self.service: WorkerService | None = None
        self.status: EmbeddedServer | None = None
        self.status_task: asyncio.Task[None] | None = None
        self.traces = tracing.Exporting(config.otlp_endpoint, "rotor-worker")

    async def start(self) -> WorkerService:
        engine, config = self.engine, self.config
        await self.traces.start()  # tracing, when asked for: before any request

        async def reconnected() -> None:
            if self.service is not None:
                await self.service.republish()

        self.nc = await connect(config.nats, f"worker {engine.card.name}", reconnected)
        if isinstance(engine, Lifecycle):
            await engine.start()
            self.engine_started = True
        for name, path in config.model.loras:  # before the first lease, which lists them
            await load_startup_adapter(engine, name, path)
        identity = WorkerIdentity.new()
        canary = None
        if config.canary.on and engine.card.capabilities.generates:  # (an embedder: none)
            canary = Canary(engine, engine.card, config.canary, name=identity.worker_id)
        service = WorkerService(
            self.nc,
            engine,
            self.tok,
            identity,
            role=config.role,
            canary=canary,
            kv_events_delay=config.kv_events_delay_ms / 1000,
        )
        await service.start()
        self.service = service
        settle()
        if config.system_port:
            self.status = status_server(service, config.system_host, config.system_port)
            self.status_task = asyncio.create_task(self.status.serve())
        return service

    async def close(self) -> None:
        if self.service is not None:
            await self.service.stop()
        if self.status is not None and self.status_task is not None:
            self.status.should_exit = True
            with contextlib.suppress(Exception):
                await self.status_task
        if self.engine_started and isinstance(self.engine, Lifecycle):
            await self.engine.stop()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.drain()
        await self.traces.stop()  # the last spans sent
