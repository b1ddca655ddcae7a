"""A model's pool of workers (router/pool.py): no live worker is an
unavailable error, counted."""

from __future__ import annotations

from typing import Any

import pytest

from rotor.model.card import ModelCard
from rotor.protocol.engine import EngineError, EngineRequest
from rotor.router.modes import RoundRobin
from rotor.router.pool import Pool

from support.workers import FakeInbox


async def test_no_live_worker_is_unavailable_and_counted() -> None:
    pool = Pool(ModelCard("m"), FakeInbox(), RoundRobin())  # type: ignore[arg-type]
    stream: Any = pool.generate(EngineRequest("r", "m", [1]))
    with pytest.raises(EngineError, match="no live worker") as e:
        await stream.__anext__()
    assert e.value.kind == "unavailable" and pool.stats.no_worker == 1
