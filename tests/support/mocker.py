"""A started MockerEngine per test, stopped afterwards (the engine tests' fixture)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.model.builtin import builtin_test_model

MakeEngine = Callable[..., Awaitable[MockerEngine]]


@pytest.fixture
async def make_engine() -> AsyncIterator[MakeEngine]:
    """`await make_engine(**MockerConfig fields)`: speedup 0 unless given."""
    card, tok = builtin_test_model()
    engines: list[MockerEngine] = []

    async def make(**config: Any) -> MockerEngine:
        config.setdefault("speedup_ratio", 0)
        engine = MockerEngine(card, tok, MockerConfig(**config))
        await engine.start()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.stop()
