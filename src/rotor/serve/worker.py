"""`rotor worker`: build the engine (the same load / build steps as `rotor
run`), register it on NATS, serve until SIGTERM, then withdraw, drain, stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from rotor import logs
from rotor.config import WorkerConfig
from rotor.engines.base import Engine, Lifecycle
from rotor.engines.registry import engine_spec
from rotor.model.tokenizer import Tokenizer
from rotor.runtime.nats.connect import connect
from rotor.runtime.nats.worker import CardConflict, WorkerService
from rotor.serve.build import StartupError, build_engine, load, serve_model
from rotor.serve.gc import settle
from rotor.serve.worker_status import status_server

log = logging.getLogger("rotor.worker")


def build(config: WorkerConfig) -> tuple[Engine, Tokenizer | None]:
    """The engine, its card carrying the parser choice (frontends read it there)."""
    spec = engine_spec(config.engine.name)
    card, tok = load(config.model, spec)
    engine = build_engine(spec, card, tok, config.engine.options)
    served = serve_model(config.model, engine.card, tok)
    engine.card.tool_call_parser = served.tool_parser
    engine.card.reasoning_parser = served.reasoning_parser
    return engine, tok


def run_worker(config: WorkerConfig) -> int:
    logs.setup(config.log_level, config.log_format)
    try:
        engine, tok = build(config)
    except StartupError as e:
        logs.say(str(e), logging.ERROR)
        return 2
    return asyncio.run(_serve(engine, tok, config))


async def _serve(engine: Engine, tok: Tokenizer | None, config: WorkerConfig) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    service: WorkerService | None = None

    async def reconnected() -> None:
        if service is not None:
            await service.republish()

    nc = await connect(config.nats, f"worker {engine.card.name}", reconnected)
    if isinstance(engine, Lifecycle):
        await engine.start()
    service = WorkerService(nc, engine, tok)
    try:
        await service.start()
    except CardConflict as e:
        logs.say(str(e), logging.ERROR)
        await nc.close()
        return 2
    settle()
    system = status_server(service, config.system_port) if config.system_port else None
    served = asyncio.create_task(system.serve()) if system is not None else None
    logs.say(f"worker {service.worker_id} serves {engine.card.name!r} on {config.nats}")
    await stop.wait()
    logs.say(f"worker {service.worker_id} is leaving")
    await service.withdraw()
    await service.drain(config.grace_period)
    await service.stop()
    if system is not None and served is not None:
        system.should_exit = True
        with contextlib.suppress(Exception):
            await served
    if isinstance(engine, Lifecycle):
        await engine.stop()
    with contextlib.suppress(Exception):
        await nc.drain()
    return 0
