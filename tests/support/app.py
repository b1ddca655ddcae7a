"""rotor in process over one engine, as `rotor run` builds it: the model
served from the engine's card and tokenizer, the System over both, and the
HTTP app whose lifespan starts and stops that system.

`app_over(engine, **create_app_kwargs)` is the app, its lifespan running;
`system_over(engine)` the system alone (not started), for what drives the
frontend without HTTP or must change the system before its app is made, and
`app_of(system)` the app over such a system."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from rotor.api.app import create_app
from rotor.pipeline.served import ServedModel
from rotor.serve.system import System

_ENGINES = object()  # the engine's own tokenizer


def system_over(engine: Any, tokenizer: Any = _ENGINES, engines: list[Any] | None = None) -> System:
    """The System over `engine`, its model ServedModel.build of the engine's
    card and tokenizer (`tokenizer` when given: the frontend's, where the
    engine's differs). `engines`: what the system starts and stops, when
    not `engine` itself (an engine wrapped by the test)."""
    tok = engine.tokenizer if tokenizer is _ENGINES else tokenizer
    system = System.local(engine, ServedModel.build(engine.card, tok))
    if engines is not None:
        system.engines = engines
    return system


@asynccontextmanager
async def app_of(system: System, **create_app_kwargs: Any) -> AsyncIterator[FastAPI]:
    """The app over `system` (create_app's other arguments as given), inside
    its lifespan: the system started, and stopped after."""
    app = create_app(
        system.frontend,
        on_startup=[system.start],
        on_shutdown=[system.stop],
        **create_app_kwargs,
    )
    async with app.router.lifespan_context(app):
        yield app


@asynccontextmanager
async def app_over(
    engine: Any,
    tokenizer: Any = _ENGINES,
    engines: list[Any] | None = None,
    **create_app_kwargs: Any,
) -> AsyncIterator[FastAPI]:
    """The app over `engine` (system_over's model and system), inside its
    lifespan."""
    async with app_of(system_over(engine, tokenizer, engines), **create_app_kwargs) as app:
        yield app
