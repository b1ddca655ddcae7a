"""Build a system from typed configs and run the chosen input.

The steps every command reuses: `load` (the model: a directory, else the
engine's built-in one), `build_engine` (by registry name), `serve_model`
(the frontend's view of the model), `build_system` (all three for one
process), `serve` (HTTP).
"""

from __future__ import annotations

import asyncio
import logging
import sys

from rotor.config import HTTPConfig, ModelConfig, RunConfig
from rotor.engines.base import Engine
from rotor.engines.registry import EngineSpec
from rotor.model.card import ModelCard
from rotor.model.served import ServedModel
from rotor.model.tokenizer import Tokenizer
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
    return System.local(engine, model, reasoning_field=config.http.reasoning_field)


def run(config: RunConfig) -> int:
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        system = build_system(config)
    except StartupError as e:
        print(f"rotor: {e}", file=sys.stderr)
        return 2
    if config.input == "http":
        return serve(system, config.http, config.log_level)
    if config.input == "text":
        from rotor.inputs.text import run_text

        return run_text(system, max_tokens=config.max_tokens)
    if config.input == "stdin":
        from rotor.inputs.stdin import run_stdin

        return asyncio.run(run_stdin(system, max_tokens=config.max_tokens))
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
            print(f"rotor: {e}", file=sys.stderr)
            return 2
    import uvicorn

    from rotor.api.app import create_app

    app = create_app(
        system.frontend,
        api_key=http.api_key,
        on_startup=[system.start],
        on_shutdown=[system.stop],
    )
    config = uvicorn.Config(
        app,
        host=http.host,
        port=http.port,
        log_level=log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    server = uvicorn.Server(config)
    names = ", ".join(repr(n) for n in system.frontend.registry.names())
    print(
        f"rotor: serving {names} on http://{http.host}:{http.port}/v1", file=sys.stderr, flush=True
    )
    server.run()
    return 0
