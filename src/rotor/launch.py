"""Build a system from typed configs and run the chosen input.

The steps every command reuses: `load` (the model: a directory, else the
engine's built-in one), `build_engine` (by registry name), `serve_model`
(the frontend's view of the model), `build_system` (all three for one
process), `serve` (HTTP).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rotor import heap, logs
from rotor.config import HTTPConfig, ModelConfig, RunConfig
from rotor.engines.base import Engine
from rotor.engines.registry import EngineSpec
from rotor.model.card import ModelCard
from rotor.model.served import ServedModel
from rotor.model.tokenizer import Tokenizer
from rotor.pipeline.workers import PreparePool
from rotor.system import System


class StartupError(Exception):
    """Something in the flags or the model directory stops startup; the message says what."""


def load(config: ModelConfig, spec: EngineSpec) -> tuple[ModelCard, Tokenizer | None]:
    """The served model: the model directory, else the engine's built-in one,
    with --max-model-len and --chat-template applied (and checked) either way."""
    from rotor.model.loader import ModelLoadError, apply_overrides, load_model

    try:
        if config.model_path:
            return load_model(
                config.model_path,
                model_name=config.model_name,
                max_model_len=config.max_model_len,
                chat_template_file=config.chat_template,
            )
        card, tok, source = spec.builtin(config.model_name)
        apply_overrides(card, config.max_model_len, config.chat_template, source)
    except ModelLoadError as e:
        raise StartupError(str(e)) from None
    return card, tok


def build_engine(spec: EngineSpec, card: ModelCard, tok: Tokenizer | None, options: dict) -> Engine:
    try:
        return spec.build(card, tok, options)
    except ValueError as e:
        raise StartupError(str(e)) from None


def serve_model(config: ModelConfig, card: ModelCard, tok: Tokenizer | None) -> ServedModel:
    """The frontend's view of a card (the engine's, with its capabilities)."""
    try:
        return ServedModel.build(card, tok, config.tool_call_parser, config.reasoning_parser)
    except ValueError as e:
        raise StartupError(str(e)) from None


def build_system(config: RunConfig) -> System:
    from rotor.engines.registry import engine_spec

    spec = engine_spec(config.engine.name)
    card, tok = load(config.model, spec)
    engine = build_engine(spec, card, tok, config.engine.options)
    model = serve_model(config.model, engine.card, tok)
    system = System.local(engine, model, reasoning_field=config.http.reasoning_field)
    system.frontend.pool = PreparePool(budget_s=config.model.template_timeout)
    return system


def check_limits(config: RunConfig) -> None:
    """The reliability flags, checked before anything is built."""
    if config.http.api_key == "":
        raise StartupError("--api-key is empty: give a key, or leave the flag out to serve without")
    if config.http.max_queued_requests < 1:
        raise StartupError("--max-queued-requests must be at least 1")
    if not config.http.shutdown_grace >= 0:
        raise StartupError("--shutdown-grace must be a number of seconds, 0 or more")
    if not config.model.template_timeout > 0:
        raise StartupError("--template-timeout must be a positive number of seconds")


def run(config: RunConfig) -> int:
    logs.setup(config.log_level, config.log_format)
    try:
        check_limits(config)
        system = build_system(config)
    except StartupError as e:
        logs.say(str(e), logging.ERROR)
        return 2
    if config.input == "http":
        return serve(system, config.http, config.log_level)
    if config.input == "text":
        from rotor.inputs.text import run_text

        return run_text(
            system, max_tokens=config.max_tokens, color=config.color, engine=config.engine.name
        )
    if config.input == "stdin":
        from rotor.inputs.stdin import run_stdin

        return asyncio.run(run_stdin(system, max_tokens=config.max_tokens, color=config.color))
    from rotor.inputs.batch import run_batch

    assert config.batch_file is not None
    return asyncio.run(
        run_batch(system, config.batch_file, config.output, max_tokens=config.max_tokens)
    )


def serve(system: System, http: HTTPConfig, log_level: str) -> int:
    if http.http_workers != 1:
        from rotor.local.workers import WorkersError, serve_workers

        try:
            return serve_workers(system, http, log_level)
        except WorkersError as e:
            logs.say(str(e), logging.ERROR)
            return 2

    from rotor.api.app import create_app

    app = create_app(
        system.frontend,
        api_key=http.api_key,
        on_startup=[system.start, heap.settle_after_startup],
        on_shutdown=[system.stop],
        max_queued=http.max_queued_requests,
    )
    names = ", ".join(repr(n) for n in system.frontend.registry.names())
    http_server(app, http, log_level, f"serving {names} on {{url}}").run()
    return 0


def http_server(app: Any, http: HTTPConfig, log_level: str, announce: str = "") -> Any:
    """uvicorn for `app`, which ends the open streams when the SIGTERM grace is over.
    `announce` (with `{url}`) is said (`logs.say`) once the port is really
    bound, naming the port the socket got."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host=http.host,
        port=http.port,
        **logs.uvicorn_options(log_level),
        # Streams are ended by rotor at the grace's end; uvicorn waits a little longer.
        timeout_graceful_shutdown=http.shutdown_grace + 5,
    )
    streams, grace = app.state.streams, http.shutdown_grace

    class Server(uvicorn.Server):
        async def startup(self, sockets: list | None = None) -> None:
            await super().startup(sockets)
            if announce and self.started and self.servers:
                host, port = self.servers[0].sockets[0].getsockname()[:2]
                url = f"http://{host}:{port}/v1"
                logs.say(announce.format(url=url), url=url)

        async def shutdown(self, sockets: list | None = None) -> None:
            loop = asyncio.get_running_loop()
            timer = loop.call_later(grace, streams.end_all, grace)
            try:
                await super().shutdown(sockets)
            finally:
                timer.cancel()

    return Server(config)
