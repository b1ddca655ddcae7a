"""`rotor frontend`: the HTTP API of `rotor run`, serving every model that
live workers on NATS offer. It needs nothing but `--nats`: models appear
when their first worker registers, and each is a pool routed by `--router`."""

from __future__ import annotations

import logging
import sys

from rotor.config import FrontendConfig
from rotor.frontend import Frontend
from rotor.launch import StartupError
from rotor.model.card import ModelCard
from rotor.model.served import ServedModel
from rotor.model.tokenizer import Tokenizer
from rotor.router.modes import LeastLoaded, Random, RoundRobin, Router
from rotor.router.pool import Pool
from rotor.runtime.connect import connect
from rotor.runtime.discovery import Discovery
from rotor.runtime.remote import ResponseRouter

log = logging.getLogger("rotor.frontend")


class Cluster:
    """The frontend's view of NATS: its inbox, discovery, and a pool per model
    in the frontend's registry."""

    def __init__(self, frontend: Frontend, config: FrontendConfig) -> None:
        self.frontend = frontend
        self.config = config
        self.nc = None
        self.inbox: ResponseRouter | None = None
        self.discovery: Discovery | None = None

    async def start(self) -> None:
        self.nc = await connect(self.config.nats, "frontend")
        self.inbox = ResponseRouter(self.nc)
        await self.inbox.start()
        self.discovery = Discovery(self.nc, self._new_model)
        await self.discovery.start()

    async def stop(self) -> None:
        if self.discovery is not None:
            await self.discovery.stop()
        if self.inbox is not None:
            await self.inbox.stop()
        if self.nc is not None:
            try:
                await self.nc.drain()
            except Exception:
                pass

    def _new_model(self, card: ModelCard, tok: Tokenizer | None, compat: str) -> Pool:
        assert self.inbox is not None
        config = self.config
        pool = Pool(
            card,
            self.inbox,
            RoundRobin(),
            migration_limit=config.migration_limit,
            request_timeout=config.request_timeout,
        )
        pool.router = make_router(config, pool)
        try:
            served = ServedModel.build(card, tok, card.tool_call_parser, card.reasoning_parser)
        except ValueError as e:  # a worker with a parser this frontend lacks
            log.error("cannot serve %r: %s", card.name, e)
            return pool
        self.frontend.registry.add(served, pool, workers=pool.describe)
        return pool


def make_router(config: FrontendConfig, pool: Pool) -> Router:
    mode = config.router
    if mode == "round_robin":
        return RoundRobin()
    if mode == "random":
        return Random()
    if mode == "least_loaded":
        return LeastLoaded(lambda worker: pool.in_flight[worker])
    raise StartupError(
        f"--router {mode!r} is not available; valid: round_robin, random, least_loaded"
    )


def run_frontend(config: FrontendConfig) -> int:
    import uvicorn

    from rotor.api.app import create_app

    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    frontend = Frontend(reasoning_field=config.http.reasoning_field)
    cluster = Cluster(frontend, config)
    app = create_app(
        frontend,
        api_key=config.http.api_key,
        on_startup=[cluster.start],
        on_shutdown=[cluster.stop],
    )
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.http.host,
            port=config.http.port,
            log_level=config.log_level.lower(),
            access_log=False,
            timeout_graceful_shutdown=10,
        )
    )
    print(
        f"rotor: frontend on http://{config.http.host}:{config.http.port}/v1, "
        f"workers from {config.nats}",
        file=sys.stderr,
        flush=True,
    )
    server.run()
    return 0
