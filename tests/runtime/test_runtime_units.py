"""The runtime's pure parts: leases, stream messages, sequence checks, the
merge of piled-up outputs, resumed requests, routing modes, lease expiry."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from rotor.model.card import ModelCard
from rotor.protocol.engine import (
    EngineError,
    EngineOutput,
    EngineRequest,
    EngineState,
    StopParams,
    merge_outputs,
)
from rotor.router.modes import LeastLoaded, Random, RoundRobin
from rotor.router.pool import Pool, _resumed
from rotor.runtime import wire
from rotor.runtime.discovery import Discovery
from rotor.runtime.lease import Lease
from rotor.runtime.remote import RemoteStream


def lease(wid: str, **state: int) -> Lease:
    return Lease(wid, "m", "card", "compat", "host:1", state=EngineState(**state))


def test_a_lease_round_trips_and_ignores_unknown_fields() -> None:
    import msgpack

    original = lease("w1", active_requests=3, kv_blocks_total=10, kv_blocks_free=4)
    assert Lease.decode(original.encode()) == original
    newer = msgpack.unpackb(original.encode())
    newer["zone"] = "eu"
    newer["state"]["future_gauge"] = 7
    assert Lease.decode(msgpack.packb(newer)) == original
    for bad in (
        b"junk",
        msgpack.packb({"worker_id": "x"}),
        msgpack.packb({**newer, "status": "?"}),
    ):
        with pytest.raises(ValueError, match="not a lease"):
            Lease.decode(bad)


def test_stream_messages_round_trip_and_reject_junk() -> None:
    assert wire.parse(wire.message(3, wire.OUTPUTS, b"xy")) == (3, wire.OUTPUTS, b"xy")
    assert wire.parse(wire.message(0, wire.DONE)) == (0, wire.DONE, None)
    for bad in (b"", wire.message(1, "z"), b"\x81\xa1s\xa1x"):
        with pytest.raises(ValueError):
            wire.parse(bad)


def test_sequence_numbers_catch_gaps_and_drop_repeats() -> None:
    stream = RemoteStream()
    assert stream.check(0) and stream.check(1)
    assert not stream.check(1)  # a repeat: dropped, never passed on
    with pytest.raises(EngineError, match="lost stream messages 2..3") as e:
        stream.check(4)
    assert e.value.kind == "unavailable"


def test_a_waiting_stream_stays_cancelled_when_a_message_lands_in_the_same_turn() -> None:
    """The client leaves (the frontend cancels the stream's reader) in the
    turn a worker message arrives: the cancel must win, or the frontend goes
    on streaming to nobody and the worker never hears of an abort."""

    async def main() -> tuple[bool, bool]:
        stream = RemoteStream()
        reader = asyncio.ensure_future(stream.take(30))
        await asyncio.sleep(0)  # the reader waits
        stream.put(b"message")
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        return reader.cancelled(), bool(await stream.take(30))

    cancelled, kept = asyncio.run(main())
    assert cancelled
    assert kept  # the message stays for whoever reads next (nothing is lost)


def test_a_silent_stream_times_out() -> None:
    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await RemoteStream().take(0.01)

    asyncio.run(main())


def test_piled_up_outputs_merge_per_run_of_one_choice() -> None:
    outs = [
        EngineOutput(0, [1], cached_tokens=5),
        EngineOutput(0, [2, 3]),
        EngineOutput(0, [4], finish="eos", matched=4),
        EngineOutput(0, [9]),
    ]
    merged = merge_outputs(outs)
    assert [(o.token_ids, o.finish, o.cached_tokens) for o in merged] == [
        ([1, 2, 3, 4], "eos", 5),
        ([9], None, None),
    ]
    text = [EngineOutput(0, text="a"), EngineOutput(0, text="b")]
    assert len(merge_outputs(text)) == 2  # text-out outputs are one token each


def test_a_resumed_request_carries_its_output_so_far() -> None:
    req = EngineRequest("r", "m", [1, 2], stop=StopParams(max_tokens=10, min_tokens=4))
    again = _resumed(req, [7, 8, 9], 0, 1)
    assert again.request_id == "r-m1"
    assert again.token_ids == [1, 2, 7, 8, 9]
    assert (again.stop.max_tokens, again.stop.min_tokens) == (7, 1)
    assert again.annotations["resume_from"] == 3
    assert req.token_ids == [1, 2] and "resume_from" not in req.annotations  # untouched


def test_routing_modes() -> None:
    req = EngineRequest("r", "m", [1])
    workers = [lease("b"), lease("a"), lease("c")]
    rr = RoundRobin()
    assert [rr.choose(workers, req).worker_id for _ in range(4)] == ["a", "b", "c", "a"]
    import random

    def draws(seed: int) -> list[str]:
        mode = Random(random.Random(seed))
        return [mode.choose(workers, req).worker_id for _ in range(300)]

    assert draws(1) == draws(1)  # seeded: repeatable
    assert {w: draws(1).count(w) > 60 for w in "abc"} == {"a": True, "b": True, "c": True}
    busy = [
        lease("a", active_requests=5),
        lease("b", active_requests=1),
        lease("c", active_requests=1, kv_blocks_total=4),
    ]
    in_flight = {"b": 3}
    assert LeastLoaded(lambda w: in_flight.get(w, 0)).choose(busy, req).worker_id == "c"


class FakeInbox:
    def __init__(self) -> None:
        self.gone: list[str] = []

    def worker_gone(self, worker_id: str) -> None:
        self.gone.append(worker_id)


async def test_a_worker_unheard_for_the_ttl_is_dropped() -> None:
    now = [100.0]
    inbox = FakeInbox()
    pool = Pool(ModelCard("m"), inbox, RoundRobin())  # type: ignore[arg-type]
    discovery = Discovery(None, lambda *a: pool, clock=lambda: now[0], lease_ttl=5)  # type: ignore[arg-type]
    discovery.pools["m"] = pool
    discovery.compat["m"] = "compat"
    await discovery.on_lease(lease("w1"))
    await discovery.on_lease(lease("w2"))
    now[0] += 3
    await discovery.on_lease(lease("w2"))  # w2 renews, w1 does not
    now[0] += 3
    discovery.expire()
    assert set(pool.workers) == {"w2"} and inbox.gone == ["w1"]
    leaving = lease("w2")
    leaving.status = "leaving"
    await discovery.on_lease(leaving)
    assert pool.live() == [] and "w2" in pool.workers  # its running requests go on
    other = Lease("w3", "m", "card", "other-compat", "h:3")
    await discovery.on_lease(other)
    assert "w3" not in pool.workers  # a card that disagrees is refused


async def test_no_live_worker_is_unavailable_and_counted() -> None:
    pool = Pool(ModelCard("m"), FakeInbox(), RoundRobin())  # type: ignore[arg-type]
    stream: Any = pool.generate(EngineRequest("r", "m", [1]))
    with pytest.raises(EngineError, match="no live worker") as e:
        await stream.__anext__()
    assert e.value.kind == "unavailable" and pool.stats.no_worker == 1
