"""`rotor planner`: the composition root. Checks the flags, connects to NATS,
feeds leases and frontend stats into the fleet view, builds the sizing rule
and the connector, serves /live, /health and /metrics on `--system-port`,
and decides every `--interval` until SIGTERM/SIGINT — then the connector
stops (`local` drains the workers it started) and the planner exits."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from typing import Any

from fastapi import FastAPI

from rotor import event_loop, logs
from rotor.config import PlannerConfig
from rotor.planner.connectors import Connector, ConnectorError
from rotor.planner.fleet import Fleet
from rotor.planner.guard import Limits
from rotor.planner.load import LoadSizer
from rotor.planner.loop import Planner, Sizer, pools_of
from rotor.planner.metrics import PlannerMetrics
from rotor.planner.observation import PoolName
from rotor.serve.build import StartupError
from rotor.serve.http import EmbeddedServer
from rotor.serve.status import status_app, status_server

log = logging.getLogger("rotor.planner")


def _commands(config: PlannerConfig) -> dict[PoolName, list[str]]:
    from rotor.planner.connectors.local import format_command

    templates: dict[PoolName, str | None]
    if config.mode == "agg":
        templates = {"agg": config.worker_cmd}
    else:
        templates = {
            "prefill": config.prefill_cmd or config.worker_cmd,
            "decode": config.decode_cmd or config.worker_cmd,
        }
    out: dict[PoolName, list[str]] = {}
    for pool, template in templates.items():
        if not template:
            raise StartupError(f"--connector local needs --worker-cmd (or --{pool}-cmd)")
        try:
            out[pool] = format_command(template)
        except ValueError as e:
            raise StartupError(f"--worker-cmd: {e}") from None
    return out


def _connector(config: PlannerConfig, nc: Any) -> Connector:
    if config.connector == "local":
        from rotor.planner.connectors.local import LocalConnector

        return LocalConnector(_commands(config), config.nats, grace_period=config.drain_timeout)
    if config.connector == "kubernetes":
        from rotor.planner.connectors.kubernetes import KubernetesConnector, parse_deployments

        try:
            deployments = parse_deployments(config.deployments)
        except ValueError as e:
            raise StartupError(f"--deployment: {e}") from None
        missing = [p for p in pools_of(config.mode) if p not in deployments]
        if missing:
            raise StartupError(
                "--connector kubernetes needs "
                + ", ".join(f"--deployment {p}=NAME" for p in missing)
            )
        return KubernetesConnector(config.namespace, deployments, config.kubeconfig)
    if config.connector == "virtual":
        from rotor.planner.connectors.virtual import VirtualConnector

        return VirtualConnector(nc, config.model, ack_timeout=config.ack_timeout)
    raise StartupError(f"--connector {config.connector!r} is not one of local, kubernetes, virtual")


def _sizer(config: PlannerConfig, metrics: PlannerMetrics) -> Sizer:
    if config.scaling == "load":
        return LoadSizer(config.ttft, config.itl)
    if not config.profile:
        raise StartupError(
            "--scaling throughput needs --profile FILE (rotor planner profile writes one)"
        )
    from rotor.planner.forecast import ThroughputSizer
    from rotor.planner.profile import Profile

    try:
        profile = Profile.load(config.profile)
    except ValueError as e:
        raise StartupError(str(e)) from None
    return ThroughputSizer(profile, config.predictor, config.ttft, config.itl, metrics)


def _limits(config: PlannerConfig) -> Limits:
    if config.min_workers > config.max_workers:
        raise StartupError(
            f"--min-workers {config.min_workers} is above --max-workers {config.max_workers}"
        )
    if config.max_gpus is not None:
        need = config.min_workers * len(pools_of(config.mode)) * config.gpus_per_worker
        if need > config.max_gpus:
            raise StartupError(
                f"--max-gpus {config.max_gpus} cannot hold --min-workers {config.min_workers} "
                f"per pool at --gpus-per-worker {config.gpus_per_worker} ({need} GPUs)"
            )
    return Limits(**{f.name: getattr(config, f.name) for f in dataclasses.fields(Limits)})


def _status_app(metrics: PlannerMetrics, planner: Planner) -> FastAPI:
    def health() -> tuple[dict[str, Any], int]:
        pending = planner.guard.pending
        body = {
            "status": "ok",
            "model": planner.model,
            "pools": list(planner.pools),
            "pending": pending.targets if pending else None,
            "dry_run": planner.dry_run,
        }
        return body, 200

    return status_app("rotor planner", health, metrics.render)


async def _serve(config: PlannerConfig) -> int:
    from rotor.runtime.nats.connect import connect
    from rotor.runtime.nats.frontend_stats import StatsFeed
    from rotor.runtime.nats.leases import LeaseFeed

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    metrics = PlannerMetrics()
    limits = _limits(config)
    sizer = _sizer(config, metrics)
    nc = await connect(config.nats, "planner")
    fleet = Fleet()
    feeds: list[LeaseFeed | StatsFeed] = [
        LeaseFeed(nc, fleet.on_lease),
        StatsFeed(nc, fleet.on_stats),
    ]
    connector: Connector | None = None
    status: EmbeddedServer | None = None
    status_task: asyncio.Task[None] | None = None
    try:
        connector = _connector(config, nc)
        await connector.start()
        for feed in feeds:
            await feed.start()
        planner = Planner(
            config.model,
            pools_of(config.mode),
            fleet,
            connector,
            sizer,
            limits,
            metrics,
            dry_run=config.dry_run,
        )
        if config.system_port:
            status = status_server(
                _status_app(metrics, planner), config.system_host, config.system_port
            )
            status_task = asyncio.create_task(status.serve())
        dry = " (dry run: nothing changes)" if config.dry_run else ""
        logs.say(
            f"planner for {config.model!r} ({config.mode}, {config.scaling} mode, "
            f"{config.connector} connector) on {config.nats}{dry}"
        )
        await planner.run(config.interval, stop)
        logs.say("planner is leaving")
        return 0
    except (StartupError, ConnectorError) as e:
        logs.say(str(e), logging.ERROR)
        return 2
    finally:
        if connector is not None:
            await connector.stop()
        for feed in feeds:
            await feed.stop()
        if status is not None and status_task is not None:
            status.should_exit = True
            with contextlib.suppress(Exception):
                await status_task
        with contextlib.suppress(Exception):
            await nc.drain()


def run_planner(config: PlannerConfig) -> int:
    logs.setup(config.log_level, config.log_format)
    try:
        return event_loop.run(_serve(config))
    except StartupError as e:
        logs.say(str(e), logging.ERROR)
        return 2
