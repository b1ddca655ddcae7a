"""`rotor frontend`: the HTTP API of `rotor run`, serving every model that
live workers on NATS offer. It needs nothing but `--nats`: models appear
when their first worker registers, and each is a pool routed by `--router`.

`Cluster` is where the NATS runtime and the router meet: the request plane,
the lease and KV event feeds (runtime/nats) on one side, discovery, the
pools and their KV indexes (router/) on the other.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from typing import Any

from rotor import logs
from rotor.api import kserve
from rotor.api.answers import Answers
from rotor.api.app import create_app
from rotor.config import FrontendConfig
from rotor.frontend import Frontend
from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.pipeline.images import ImageLoader
from rotor.pipeline.preparer import Preparer
from rotor.pipeline.served import ServedModel
from rotor.router.discovery import Discovery
from rotor.router.kv import KVRouter
from rotor.router.kv_cost import KVCost
from rotor.router.kv_sync import KVSync
from rotor.router.modes import LeastLoaded, Random, RoundRobin, Router
from rotor.router.pool import Pool
from rotor.router.sessions import Sessions
from rotor.runtime.nats.connect import connect
from rotor.runtime.nats.frontend_stats import StatsPublisher
from rotor.runtime.nats.kv_events import KVEventFeed, KVSnapshots
from rotor.runtime.nats.leases import CardStore, LeaseFeed
from rotor.runtime.nats.request_plane import RequestPlane
from rotor.runtime.nats.response_bucket import ResponseBucket
from rotor.serve.build import StartupError, api_keys_problem
from rotor.serve.gc import settle_after_startup
from rotor.serve.http import http_server
from rotor.serve.kserve import hold_shared_port, kserve_options, say_shared_port
from rotor.serve.request_log import for_process, open_request_log
from rotor.serve.response_store import build_response_store, check_response_store
from rotor.tracing import Exporting
from rotor.tracing import missing as tracing_missing

log = logging.getLogger("rotor.frontend")

# The block size the kv router hashes prompts at when workers publish no KV
# events (vLLM's and the mocker's default is 16).
APPROX_BLOCK_SIZE = 16


class Cluster:
    """The frontend's view of NATS: its request plane, discovery, and a pool
    per model in the frontend's registry. Everything is built once connected
    (`start`), and stopped in the reverse order."""

    def __init__(
        self,
        frontend: Frontend,
        config: FrontendConfig,
        answers: Answers,
        responses: ResponseBucket | None = None,
    ) -> None:
        self.frontend = frontend
        self.config = config
        self.answers = answers
        self.responses = responses  # stored responses' bucket: on this connection
        self._stop: list[Any] = []  # what start built, each with a stop(), in build order
        self.discovery: Discovery | None = None

    async def start(self) -> None:
        planes: list[RequestPlane] = []

        async def reconnected() -> None:
            for plane in planes:
                plane.reconnected()

        nc = await connect(self.config.nats, "frontend", reconnected)
        self._stop.append(_Drain(nc))
        if self.responses is not None:
            await self.responses.start(nc)
        plane = RequestPlane(nc, on_gone=self._worker_gone)
        planes.append(plane)
        await plane.start()
        self._stop.append(plane)
        sync = KVSync(KVSnapshots(nc), self._kv_router_of)
        self._stop.append(sync)
        events = KVEventFeed(nc, sync.on_event)
        await events.start()
        self._stop.append(events)
        discovery = Discovery(
            lambda card, tok: self._new_model(card, tok, plane, sync), CardStore(nc)
        )
        await discovery.start()
        self._stop.append(discovery)
        self.discovery = discovery
        leases = LeaseFeed(nc, discovery.on_lease)
        await leases.start()
        self._stop.append(leases)
        stats = StatsPublisher(nc, plane.frontend_id, self.answers.take)
        await stats.start()
        self._stop.append(stats)

    async def stop(self) -> None:
        while self._stop:
            await self._stop.pop().stop()

    def _worker_gone(self, worker: str) -> None:
        """A request found nobody serving `worker`: out of its pool at once."""
        if self.discovery is not None:
            self.discovery.gone(worker)

    def _kv_router_of(self, worker: str) -> KVRouter | None:
        pool = self.discovery.pool_of(worker) if self.discovery is not None else None
        return pool.kv_router_of(worker) if pool is not None else None

    def _new_model(
        self, card: ModelCard, tok: Tokenizer | None, plane: RequestPlane, sync: KVSync
    ) -> Pool:
        config = self.config
        router = make_router(config, card)
        follows_events = isinstance(router, KVRouter) and router.index is not None
        pool = Pool(
            card,
            plane,
            router,
            migration_limit=config.migration_limit,
            request_timeout=config.request_timeout,
            on_join=sync.resync if follows_events else None,  # a new worker: its blocks so far
            # the prefill workers' own router (and, for kv, their own index)
            prefill_router=make_router(config, card),
            disagg=config.disagg,
            sessions=Sessions(config.session_ttl) if config.session_ttl > 0 else None,
            overload=config.overload,
        )
        try:
            served = ServedModel.build(card, tok, card.tool_call_parser, card.reasoning_parser)
        except ValueError as e:  # a worker with a parser this frontend lacks
            log.error("cannot serve %r: %s", card.name, e)
            return pool
        self.frontend.registry.add(served, pool)
        return pool


class _Drain:
    """The NATS connection, as one more thing to stop: drained, errors ignored."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc

    async def stop(self) -> None:
        try:
            await self.nc.drain()
        except Exception:
            pass


def make_router(config: FrontendConfig, card: ModelCard) -> Router:
    mode = config.router
    if mode == "round_robin":
        return RoundRobin()
    if mode == "random":
        return Random()
    if mode == "least_loaded":
        return LeastLoaded()
    if mode == "kv":
        block_size = card.capabilities.kv_block_size
        approx = not config.kv_events or block_size < 1
        if block_size < 1:
            log.warning(
                "%r publishes no KV events: kv routing records its own decisions", card.name
            )
            block_size = APPROX_BLOCK_SIZE
        cost = KVCost(
            block_size,
            config.kv_overlap_weight,
            config.router_temperature,
            host_weight=config.router_host_hit_weight,
            disk_weight=config.router_disk_hit_weight,
        )
        return KVRouter(
            block_size,
            cost,
            approx_ttl=config.router_ttl if approx else None,
            predicted_ttl=config.router_predicted_ttl,
        )
    raise StartupError(f"--router {mode!r} is not one of round_robin, random, least_loaded, kv")


def run_frontend(config: FrontendConfig) -> int:
    logs.setup(config.log_level, config.log_format)
    http = config.http
    problem = api_keys_problem(http.api_keys)
    if problem is None:
        try:
            check_response_store(http.response_store, "nats")
        except StartupError as e:
            problem = str(e)
    if problem is None:
        problem = tracing_missing(http.otlp_endpoint)
    if problem is None and http.grpc_port is not None:
        problem = kserve.missing()
    if problem is not None:
        logs.say(problem, logging.ERROR)
        return 2
    if http.http_workers != 1:
        return run_frontends(config)
    announce = f"frontend on {{url}}, workers from {config.nats}"
    frontend_server(config, announce).run()
    return 0


def frontend_server(config: FrontendConfig, announce: str = "") -> Any:
    """One whole frontend (its NATS connection, discovery, routers, request
    plane) as a uvicorn server, not yet running."""
    http = config.http
    frontend = Frontend(
        reasoning_field=http.reasoning_field,
        preparer=Preparer(budget_s=config.template_timeout),
        images=ImageLoader.build(http.media),
    )
    answers = Answers()
    responses = build_response_store(http.response_store, "nats")
    bucket = responses if isinstance(responses, ResponseBucket) else None
    cluster = Cluster(frontend, config, answers, bucket)
    traces = Exporting(http.otlp_endpoint, "rotor-frontend")  # in the process that serves
    app = create_app(
        frontend,
        api_key=http.api_keys or None,
        response_store=responses,
        on_startup=[traces.start, cluster.start, settle_after_startup],
        on_shutdown=[cluster.stop, responses.close, frontend.images.aclose, traces.stop],
        max_queued=http.max_queued_requests,
        max_waiting=http.max_waiting_requests,
        request_log=open_request_log(http),
        answers=answers,
        kserve=kserve_options(http),
        overload_status=config.overload_status,
    )
    return http_server(app, http, config.log_level, announce)


def run_frontends(config: FrontendConfig) -> int:
    """`--http-workers N`: N whole frontends on one port (SO_REUSEPORT), as if
    N `rotor frontend`s ran, under a parent that passes SIGTERM/SIGINT on
    (each drains), exits when they do, and takes them with it if killed."""
    from rotor.serve.processes import (
        ProcessError,
        fork_each,
        listen_all,
        stop_timeout,
        supervise,
    )

    try:
        http, held = hold_shared_port(config.http)  # --grpc-port: one port for all
    except ProcessError as e:
        logs.say(str(e), logging.ERROR)
        return 2
    try:
        socks = listen_all(http.host, http.port, http.http_workers)
    except ProcessError as e:
        logs.say(str(e), logging.ERROR)
        return 2
    port = socks[0].getsockname()[1]

    def serve(sock: socket.socket) -> int:
        if held is not None:
            held.close()  # the parent's to hold
        # each HTTP process its own request-log file (serve/request_log.py)
        own = dataclasses.replace(config, http=for_process(http, socks.index(sock)))
        server = frontend_server(own)
        server.run(sockets=[sock])
        return 0 if server.started else 1

    pids = fork_each(socks, serve)
    say_shared_port(http)
    url = f"http://{http.host}:{port}/v1"
    logs.say(
        f"frontend on {url} with {len(pids)} HTTP processes, workers from {config.nats}", url=url
    )
    return supervise(pids, timeout=stop_timeout(http.shutdown_grace))
