"""A started server process freezes what startup built and collects young
garbage less often (serve/gc.py)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from rotor.serve import gc as heap


@pytest.fixture
def restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def walked(obj: object) -> bool:
    """The collector still walks `obj` (frozen objects are in none of its generations)."""
    return any(o is obj for o in gc.get_objects())


@pytest.mark.usefixtures("restored")
def test_settling_freezes_what_startup_built_and_raises_the_young_threshold() -> None:
    built_at_startup = [["schemas"], ["templates"]]
    older = gc.get_threshold()[1:]
    assert walked(built_at_startup)
    asyncio.run(heap.settle_after_startup())
    assert not walked(built_at_startup)
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, *older)
    made_later = [["a request's"]]
    assert walked(made_later)  # collected as ever, should it end in a cycle
