"""Build a whole system from parsed flags and run the chosen input."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from rotor.engines.base import Engine
from rotor.frontend import Frontend
from rotor.model.card import ModelCard, echo_card
from rotor.model.tokenizer import Tokenizer
from rotor.pipeline.preprocess import ServedModel


class StartupError(Exception):
    """Something in the flags or the model directory stops startup; the message says what."""


def load(args: argparse.Namespace, engine_name: str) -> tuple[ModelCard, Tokenizer | None]:
    """The served model: the model directory, else the engine's built-in one,
    with --max-model-len and --chat-template applied (and checked) either way."""
    from rotor.model.loader import ModelLoadError, apply_overrides, load_model

    try:
        if args.model_path:
            return load_model(
                args.model_path,
                model_name=args.model_name,
                max_model_len=args.max_model_len,
                chat_template_file=args.chat_template,
            )
        if engine_name == "mocker":
            from rotor.model.builtin import BUILTIN_MODEL_NAME, builtin_test_model

            card, tok = builtin_test_model(args.model_name or BUILTIN_MODEL_NAME)
            source = "the built-in test model"
        else:
            card, tok = echo_card(args.model_name or "echo"), None
            source = "the echo engine"
        apply_overrides(card, args.max_model_len, args.chat_template, source)
    except ModelLoadError as e:
        raise StartupError(str(e)) from None
    return card, tok


def build_engine(
    args: argparse.Namespace, engine_name: str, card: ModelCard, tok: Tokenizer | None
) -> Engine:
    if engine_name == "mocker":
        from rotor.engines.mocker import MockerConfig, MockerEngine

        assert tok is not None
        config = MockerConfig(
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            block_size=args.block_size,
            num_kv_blocks=args.num_kv_blocks,
            speedup_ratio=args.speedup_ratio,
            structural_tags=not args.no_structural_tags,
        )
        return MockerEngine(card, tok, config)
    from rotor.engines.echo import EchoEngine, delay_from_env

    try:
        delay = delay_from_env()
    except ValueError as e:
        raise StartupError(str(e)) from None
    return EchoEngine(card, tok, delay)


def build_frontend(args: argparse.Namespace, engine_name: str) -> Frontend:
    card, tok = load(args, engine_name)
    engine = build_engine(args, engine_name, card, tok)
    try:
        served = ServedModel.build(engine.card, tok, args.tool_call_parser, args.reasoning_parser)
    except ValueError as e:
        raise StartupError(str(e)) from None
    return Frontend(engine, served, reasoning_field=args.reasoning_field)


def run(args: argparse.Namespace, kind: str, path: str | None, engine_name: str) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        frontend = build_frontend(args, engine_name)
    except StartupError as e:
        print(f"rotor: {e}", file=sys.stderr)
        return 2
    if kind == "http":
        return serve(frontend, args)
    if kind == "text":
        from rotor.inputs.text import run_text

        return run_text(frontend, max_tokens=args.max_tokens)
    if kind == "stdin":
        from rotor.inputs.stdin import run_stdin

        return asyncio.run(run_stdin(frontend, max_tokens=args.max_tokens))
    from rotor.inputs.batch import run_batch

    assert path is not None
    return asyncio.run(run_batch(frontend, path, args.output, max_tokens=args.max_tokens))


def serve(frontend: Frontend, args: argparse.Namespace) -> int:
    import uvicorn

    from rotor.api.app import create_app

    app = create_app(frontend, api_key=args.api_key)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    server = uvicorn.Server(config)
    print(
        f"rotor: serving {frontend.model.card.name!r} on http://{args.host}:{args.port}/v1",
        file=sys.stderr,
        flush=True,
    )
    server.run()
    return 0
