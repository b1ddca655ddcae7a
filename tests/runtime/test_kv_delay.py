"""`--kv-events-delay-ms` (runtime/nats/kv_delay.py): a worker's KV events
held back, each step's together, and published in order once due on the
event loop's clock; a closed delay publishes nothing more."""

from __future__ import annotations

import asyncio

import pytest

from rotor.protocol.kv import AllCleared, BlocksRemoved, BlocksStored, KVEvent
from rotor.runtime.nats.kv_delay import DelayedKVEvents

from support.wait import wait_for_async

DELAY_S = 0.05


async def test_each_steps_events_wait_the_delay_and_go_in_order() -> None:
    loop = asyncio.get_running_loop()
    published: list[tuple[int, float]] = []
    delay = DelayedKVEvents(DELAY_S, lambda e: published.append((e.event_id, loop.time())))
    # step 1: two events in one turn of the loop
    first = loop.time()
    delay.add(BlocksStored(1, [11, 12]))
    delay.add(BlocksRemoved(2, [9]))
    await asyncio.sleep(0)  # the step is closed at its turn's end
    # step 2, in a later turn
    second = loop.time()
    delay.add(BlocksStored(3, [13], 12))
    await asyncio.sleep(0)
    assert published == [] and len(delay) == 3
    await wait_for_async("the first step", lambda: len(published) >= 2, timeout=5, pause=0)
    assert [eid for eid, _ in published[:2]] == [1, 2]
    assert all(at >= first + DELAY_S - 0.01 for _, at in published[:2])
    await wait_for_async("the second step", lambda: len(published) == 3, timeout=5, pause=0)
    assert published[2][0] == 3 and published[2][1] >= second + DELAY_S - 0.01
    assert len(delay) == 0


async def test_a_closed_delay_drops_what_it_holds() -> None:
    published: list[KVEvent] = []
    delay = DelayedKVEvents(DELAY_S, published.append)
    delay.add(AllCleared(1))
    delay.close()
    # a marker that comes due later than the dropped event would have
    marker: list[KVEvent] = []
    DelayedKVEvents(DELAY_S * 2, marker.append).add(AllCleared(2))
    await wait_for_async("the marker", lambda: bool(marker), timeout=5, pause=0)
    assert published == [] and len(delay) == 0


def test_the_delay_must_be_positive() -> None:
    with pytest.raises(ValueError, match="> 0"):
        DelayedKVEvents(0, print)
