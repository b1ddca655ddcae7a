"""`rotor frontend`: the HTTP API of `rotor run`, serving every model that
live workers on NATS offer. It needs nothing but `--nats`: models appear
when their first worker registers, and each is a pool routed by `--router`."""

from __future__ import annotations

import logging
import socket
from typing import Any

from rotor import heap, logs
from rotor.config import FrontendConfig
from rotor.frontend import Frontend
from rotor.launch import StartupError, http_server
from rotor.model.card import ModelCard
from rotor.model.served import ServedModel
from rotor.model.tokenizer import Tokenizer
from rotor.pipeline.workers import PreparePool
from rotor.router.kv import KVRouter
from rotor.router.kv_cost import KVCost
from rotor.router.modes import LeastLoaded, Random, RoundRobin, Router
from rotor.router.pool import Pool
from rotor.runtime.connect import connect
from rotor.runtime.discovery import Discovery
from rotor.runtime.kv_watch import KVWatch
from rotor.runtime.remote import ResponseRouter

log = logging.getLogger("rotor.frontend")

# The block size the kv router hashes prompts at when workers publish no KV
# events (vLLM's and the mocker's default is 16).
APPROX_BLOCK_SIZE = 16


class Cluster:
    """The frontend's view of NATS: its inbox, discovery, and a pool per model
    in the frontend's registry."""

    def __init__(self, frontend: Frontend, config: FrontendConfig) -> None:
        self.frontend = frontend
        self.config = config
        self.nc = None
        self.inbox: ResponseRouter | None = None
        self.discovery: Discovery | None = None
        self.kv_watch: KVWatch | None = None

    async def start(self) -> None:
        self.nc = await connect(self.config.nats, "frontend")
        self.inbox = ResponseRouter(self.nc)
        await self.inbox.start()
        self.kv_watch = KVWatch(self.nc, self._kv_router_of)
        await self.kv_watch.start()
        self.discovery = Discovery(self.nc, self._new_model)
        await self.discovery.start()

    def _kv_router_of(self, worker: str) -> KVRouter | None:
        discovery = self.discovery
        seen = discovery.seen.get(worker) if discovery is not None else None
        pool = discovery.pools.get(seen[0]) if discovery is not None and seen else None
        router = pool.router if pool is not None else None
        return router if isinstance(router, KVRouter) else None

    async def stop(self) -> None:
        if self.kv_watch is not None:
            await self.kv_watch.stop()
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
        if isinstance(pool.router, KVRouter) and pool.router.index is not None:
            watch = self.kv_watch
            assert watch is not None
            pool.on_join = watch.resync  # a new worker: its blocks so far
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
    if mode == "kv":
        block_size = pool.card.capabilities.kv_block_size
        approx = not config.kv_events or block_size < 1
        if block_size < 1:
            log.warning(
                "%r publishes no KV events: kv routing records its own decisions", pool.card.name
            )
            block_size = APPROX_BLOCK_SIZE
        cost = KVCost(block_size, config.kv_overlap_weight, config.router_temperature)
        return KVRouter(
            block_size,
            cost,
            lambda worker: pool.prefilling[worker],
            approx_ttl=config.router_ttl if approx else None,
        )
    raise StartupError(f"--router {mode!r} is not one of round_robin, random, least_loaded, kv")


def run_frontend(config: FrontendConfig) -> int:
    logs.setup(config.log_level, config.log_format)
    http = config.http
    if http.api_key == "":
        logs.say("--api-key is empty: give a key, or leave the flag out", logging.ERROR)
        return 2
    if http.http_workers != 1:
        return run_frontends(config)
    announce = f"frontend on {{url}}, workers from {config.nats}"
    frontend_server(config, announce).run()
    return 0


def frontend_server(config: FrontendConfig, announce: str = "") -> Any:
    """One whole frontend (its NATS connection, discovery, routers, inbox) as
    a uvicorn server, not yet running."""
    from rotor.api.app import create_app

    http = config.http
    frontend = Frontend(reasoning_field=http.reasoning_field)
    frontend.pool = PreparePool(budget_s=config.template_timeout)
    cluster = Cluster(frontend, config)
    app = create_app(
        frontend,
        api_key=http.api_key,
        on_startup=[cluster.start, heap.settle_after_startup],
        on_shutdown=[cluster.stop],
        max_queued=http.max_queued_requests,
    )
    return http_server(app, http, config.log_level, announce)


def run_frontends(config: FrontendConfig) -> int:
    """`--http-workers N`: N whole frontends on one port (SO_REUSEPORT), as if
    N `rotor frontend`s ran, under a parent that passes SIGTERM/SIGINT on
    (each drains), exits when they do, and takes them with it if killed."""
    from rotor.local.processes import (
        WorkersError,
        fork_each,
        listen_all,
        stop_timeout,
        supervise,
    )

    http = config.http
    try:
        socks = listen_all(http.host, http.port, http.http_workers)
    except WorkersError as e:
        logs.say(str(e), logging.ERROR)
        return 2
    port = socks[0].getsockname()[1]

    def serve(sock: socket.socket) -> int:
        server = frontend_server(config)
        server.run(sockets=[sock])
        return 0 if server.started else 1

    pids = fork_each(socks, serve)
    url = f"http://{http.host}:{port}/v1"
    logs.say(
        f"frontend on {url} with {len(pids)} HTTP processes, workers from {config.nats}", url=url
    )
    return supervise(pids, timeout=stop_timeout(http.shutdown_grace))
