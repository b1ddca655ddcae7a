"""The steps every command builds from: `load` (the model: a directory or a Hub
id's snapshot, else the engine's built-in one), `build_engine` (by registry name), `serve_model`
(the frontend's view of the model) and `build_system` (all three for one
process). A problem with the flags or the model directory is a
`StartupError` whose message says what."""

from __future__ import annotations

from typing import Any

from rotor import tracing
from rotor.api import kserve
from rotor.config import EngineConfig, ModelConfig, RunConfig
from rotor.engines.base import Adapters, Engine
from rotor.engines.registry import EngineSpec, engine_spec
from rotor.model.card import ModelCard
from rotor.model.lora import AdapterError, read_adapter
from rotor.model.tokenizer import Tokenizer
from rotor.pipeline.preparer import Preparer
from rotor.pipeline.served import ServedModel
from rotor.serve.system import System


class StartupError(Exception):
    """Something in the flags or the model directory stops startup; the message says what."""


def load(config: ModelConfig, spec: EngineSpec) -> tuple[ModelCard, Tokenizer | None]:
    """The served model: the model directory (or the Hub id's snapshot), else the engine's built-in one,
    with --max-model-len and --chat-template applied (and checked) either way."""
    from rotor.model.hub import resolve_model
    from rotor.model.loader import ModelLoadError, apply_overrides, load_model

    name, aliases = served_names(config)
    tok: Tokenizer | None
    try:
        if config.model_path:
            # a Hub id: its snapshot directory, served under the id (as vLLM does)
            source = resolve_model(config.model_path, config.revision, weights=spec.weights)
            card, tok = load_model(
                source.directory,
                model_name=name or source.hub_id,
                max_model_len=config.max_model_len,
                chat_template_file=config.chat_template,
            )
        else:
            if config.revision is not None:
                raise StartupError("--revision needs --model-path with a Hub id")
            card, tok, builtin = spec.builtin(name)
            apply_overrides(card, config.max_model_len, config.chat_template, builtin)
    except ModelLoadError as e:
        raise StartupError(str(e)) from None
    card.aliases = [a for a in aliases if a != card.name]
    return card, tok


def served_names(config: ModelConfig) -> tuple[str | None, list[str]]:
    """The canonical name (None: the model's own) and the aliases, from
    --model-name and --served-model-name."""
    names = list(dict.fromkeys(config.served_model_names))  # in order, once each
    if not names:
        return config.model_name, []
    if config.model_name is not None and config.model_name != names[0]:
        raise StartupError(
            f"--model-name {config.model_name!r} and --served-model-name {names[0]!r} "
            "both name the model: give one (--served-model-name's first name is the canonical one)"
        )
    if any(not n.strip() for n in names):
        raise StartupError("--served-model-name: a name is empty")
    return names[0], names[1:]


def build_engine(
    spec: EngineSpec, card: ModelCard, tok: Tokenizer | None, options: dict[str, Any]
) -> Engine:
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
    """`rotor run`'s one process: the model, its engine, the frontend over both."""
    spec = engine_spec(config.engine.name)
    card, tok = load(config.model, spec)
    check_adapters(config.model)
    engine = build_engine(spec, card, tok, engine_options(config.engine, config.model))
    check_adapter_engine(config.model, engine)
    model = serve_model(config.model, engine.card, tok)
    return System.local(
        engine,
        model,
        reasoning_field=config.http.reasoning_field,
        preparer=Preparer(budget_s=config.model.template_timeout),
        adapters=config.model.loras,
    )


def engine_options(engine: EngineConfig, model: ModelConfig) -> dict[str, Any]:
    """The engine's flags, and the `--lora` adapters it loads once started
    (vLLM must enable LoRA when it is built)."""
    return {**engine.options, "loras": list(model.loras)}


def check_adapters(config: ModelConfig) -> None:
    """Each `--lora NAME=DIR` checked before the engine is built (a bad
    directory must not wait for vLLM's minute of startup to be reported)."""
    names = [name for name, _ in config.loras]
    if len(set(names)) != len(names):
        raise StartupError("--lora: a name is given twice")
    for name, path in config.loras:
        try:
            read_adapter(name, path)
        except AdapterError as e:
            raise StartupError(f"--lora {name}={path}: {e.message}") from None


def check_adapter_engine(config: ModelConfig, engine: Engine) -> None:
    if config.loras and not isinstance(engine, Adapters):
        raise StartupError("--lora: this engine cannot load LoRA adapters (mocker and vllm can)")


def api_keys_problem(keys: list[str]) -> str | None:
    """What is wrong with the `--api-key`s (an empty one: auth must never be
    off by mistake), or None."""
    if any(not key.strip() for key in keys):
        return "--api-key is empty: give a key, or leave the flag out to serve without"
    return None


def check_limits(config: RunConfig) -> None:
    """The reliability flags, checked before anything is built."""
    problem = api_keys_problem(config.http.api_keys)
    if problem is not None:
        raise StartupError(problem)
    if config.http.max_queued_requests < 1:
        raise StartupError("--max-queued-requests must be at least 1")
    if config.http.max_waiting_requests < 0:
        raise StartupError("--max-waiting-requests must be 0 or more")
    if not config.http.shutdown_grace >= 0:
        raise StartupError("--shutdown-grace must be a number of seconds, 0 or more")
    if not config.model.template_timeout > 0:
        raise StartupError("--template-timeout must be a positive number of seconds")
    problem = tracing.missing(config.http.otlp_endpoint) if config.input == "http" else None
    if problem is None and config.input == "http" and config.http.grpc_port is not None:
        problem = kserve.missing()
    if problem is not None:
        raise StartupError(problem)
