"""The engine tests' shared pieces: the built-in model, a request builder, output
helpers, and `make_engine` (a started MockerEngine per test, stopped afterwards)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from rotor.engines.base import Engine
from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.model.builtin import builtin_test_model
from rotor.protocol.engine import EngineOutput, EngineRequest, pulled

CARD, TOK = builtin_test_model()
EOS = CARD.eos_token_ids[0]
PROMPT = "<|im_start|>user\nHello, world!<|im_end|>\n<|im_start|>assistant\n"

MakeEngine = Callable[..., Awaitable[MockerEngine]]

_ids = itertools.count()


def request(
    mock: Any = None, prompt: str = PROMPT, n: int = 1, rid: str | None = None, **kw: Any
) -> EngineRequest:
    """A request for the built-in model: `mock` is the script (None: seeded output)."""
    annotations = {"mock": mock} if mock is not None else {}
    return EngineRequest(
        request_id=rid or f"req-{next(_ids)}",
        model=CARD.name,
        token_ids=TOK.encode(prompt),
        n=n,
        annotations=annotations,
        **kw,
    )


async def collect(engine: Engine, req: EngineRequest) -> list[EngineOutput]:
    return [out async for out in pulled(engine.generate(req))]


def ids_of(outs: list[EngineOutput], index: int = 0) -> list[int]:
    """Every token id choice `index` received, in order."""
    return [t for o in outs if o.index == index for t in o.token_ids]


@pytest.fixture
async def make_engine() -> AsyncIterator[MakeEngine]:
    """`await make_engine(**MockerConfig fields)`: speedup 0 and the loop's turn
    after every step, unless given."""
    engines: list[MockerEngine] = []

    async def make(**config: Any) -> MockerEngine:
        config.setdefault("speedup_ratio", 0)
        config.setdefault("step_slice_ms", 0)  # a step at a time, as the tests read them
        engine = MockerEngine(CARD, TOK, MockerConfig(**config))
        await engine.start()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.stop()
