"""A model's pool of workers and its stream of one request (router/pool.py,
router/pool_stream.py), step by step against one fake worker link
(support/link.py): routing with no live worker; a failed attempt migrated
(the reader sees one answer), refused, or given up at the limit; the
disaggregated handover (the prefill's first token held for the decode
worker's first output, a failed prefill done locally, a decode worker that
fails after the handover, a first token that ends the answer, an enforced
split with no prefill worker); and a reader that leaves mid-migration."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rotor.model.card import Capabilities, ModelCard
from rotor.protocol.engine import (
    KV_TRANSFER,
    PREFILL_ONLY,
    RESUME_FROM,
    EngineError,
    EngineOutput,
    EngineRequest,
    StopParams,
    pulled,
)
from rotor.protocol.flow import Pulled
from rotor.protocol.lease import Lease
from rotor.router.disagg import DisaggPolicy
from rotor.router.modes import RoundRobin
from rotor.router.pool import Pool

from support.link import FakeLink
from support.sinks import Outputs, Recorder
from support.wait import wait_for_async
from support.workers import FakeInbox

TIMEOUT_S = 10  # a guard against a hang: what the tests wait for takes a few turns of the loop
TRANSFER = {"engine": "mocker", "transfer_id": "t1", "block_hashes": [1, 2]}


def pool_of(*workers: str, card: ModelCard | None = None, **kw: Any) -> tuple[FakeLink, Pool]:
    """A pool over the fake link; each worker "id" or "id:role"."""
    link = FakeLink()
    pool = Pool(card or ModelCard("m"), link, RoundRobin(), prefill_router=RoundRobin(), **kw)
    for spec in workers:
        wid, _, role = spec.partition(":")
        pool.upsert(Lease(wid, "m", "card", "compat", "host:1", role=role or "agg"))  # type: ignore[arg-type]
    return link, pool


async def asked(link: FakeLink, n: int) -> None:
    await wait_for_async(f"{n} request(s) asked", lambda: len(link.asked) >= n, TIMEOUT_S, pause=0)


async def read_first(pool: Pool, request: EngineRequest) -> tuple[Pulled[EngineOutput], Any]:
    """The pool's stream pulled until its first output comes (a task)."""
    stream = pulled(pool.generate(request))
    return stream, asyncio.ensure_future(stream.__anext__())


def tokens(outputs: list[EngineOutput]) -> list[int]:
    return [t for o in outputs for t in o.token_ids]


async def test_no_live_worker_is_unavailable_and_counted() -> None:
    pool = Pool(ModelCard("m"), FakeInbox(), RoundRobin())  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="no live worker") as e:
        await pulled(pool.generate(EngineRequest("r", "m", [1]))).__anext__()
    assert e.value.kind == "unavailable" and pool.stats.no_worker == 1


async def test_a_pushed_pool_stream_migrates_and_the_reader_sees_one_answer() -> None:
    link, pool = pool_of("a", "b", migration_limit=2)
    stream, first = await read_first(pool, EngineRequest("r", "m", [1, 2, 3]))
    await asked(link, 1)
    link.asked[0].output(10)
    assert (await first).token_ids == [10]
    sink = Outputs()
    stream.subscribe(sink)  # the switch: the rest pushed
    link.asked[0].output(11, 12)
    await asyncio.sleep(0)
    link.asked[0].gone()
    await asked(link, 2)
    other = link.asked[1]
    assert other.worker_id != link.asked[0].worker_id
    assert other.request.annotations[RESUME_FROM] == 3
    assert other.request.token_ids == [1, 2, 3, 10, 11, 12]
    other.output(13, finish="length")
    other.done()
    await wait_for_async("the sink's end", lambda: sink.ending != "open", TIMEOUT_S, pause=0)
    assert tokens(sink.outputs_) == [11, 12, 13]
    assert sink.ending is None
    assert pool.stats.migrations == {"worker_gone": 1}
    assert not pool.load.in_flight and not pool.load.prefilling  # every attempt let go


async def test_a_refused_attempt_is_not_migrated() -> None:
    link, pool = pool_of("a", "b")
    stream, first = await read_first(pool, EngineRequest("r", "m", [1]))
    await asked(link, 1)
    link.asked[0].error(EngineError("max_tokens is too large", "refused", "max_tokens"))
    with pytest.raises(EngineError, match="max_tokens is too large") as e:
        await first
    assert e.value.param == "max_tokens"
    assert len(link.asked) == 1 and not pool.stats.migrations


async def test_migrations_stop_at_the_limit() -> None:
    link, pool = pool_of("a", "b", "c", migration_limit=1)
    stream, first = await read_first(pool, EngineRequest("r", "m", [1]))
    await asked(link, 1)
    link.asked[0].gone()
    await asked(link, 2)
    link.asked[1].gone()
    with pytest.raises(EngineError, match="gave up after 1 migration") as e:
        await first
    assert e.value.cause == "worker_gone" and len(link.asked) == 2


async def test_a_constrained_request_migrates_only_where_constraints_resume() -> None:
    guided = EngineRequest("r", "m", [1])
    guided.sampling.guided = {"type": "regex", "regex": "a+"}
    link, pool = pool_of("a", "b")
    stream, first = await read_first(pool, guided)
    await asked(link, 1)
    link.asked[0].gone()
    with pytest.raises(EngineError, match="decoding constraint cannot resume"):
        await first
    card = ModelCard("m", capabilities=Capabilities(resumable_constraints=True))
    link, pool = pool_of("a", "b", card=card)
    stream, first = await read_first(pool, guided)
    await asked(link, 1)
    link.asked[0].gone()
    await asked(link, 2)  # resumable: it moves
    link.asked[1].output(5, finish="length")
    assert (await first).token_ids == [5]


async def test_the_prefills_first_token_is_held_for_the_decode_workers_first_output() -> None:
    link, pool = pool_of("p:prefill", "d:decode", disagg=DisaggPolicy("always"))
    request = EngineRequest("r", "m", [1, 2, 3], stop=StopParams(max_tokens=10))
    source = pool.generate(request)
    sink: Recorder[EngineOutput] = Recorder()
    source.subscribe(sink)
    await asked(link, 1)
    prefill = link.asked[0]
    assert prefill.worker_id == "p" and prefill.request.annotations[PREFILL_ONLY]
    assert prefill.request.stop.max_tokens == 1
    prefill.output(7, finish="length", kv_transfer=TRANSFER)
    prefill.done()
    await asked(link, 2)
    decode = link.asked[1]
    assert decode.worker_id == "d"
    assert decode.request.token_ids == [1, 2, 3, 7]  # the first token is part of its prompt
    assert decode.request.annotations[KV_TRANSFER] == {**TRANSFER, "worker": "p"}
    for _ in range(5):
        await asyncio.sleep(0)
    assert sink.items == []  # held: the handover is part of the time to the first token
    decode.output(8)
    await wait_for_async("two outputs", lambda: len(sink.items) == 2, TIMEOUT_S, pause=0)
    assert [o.token_ids for o in sink.items] == [[7], [8]]
    assert pool.stats.handover.count == 1
    assert pool.stats.disagg == {("remote", "always"): 1}
    assert pool.routed("r") is not None
    assert pool.routed("r").headers["x-rotor-worker"] == "prefill=p, decode=d"  # type: ignore[union-attr]
    source.stop()
    assert link.released == []  # fetched: nothing left to release


async def test_a_failed_prefill_is_done_by_the_decode_worker() -> None:
    link, pool = pool_of("p:prefill", "d:decode", disagg=DisaggPolicy("always"))
    stream, first = await read_first(pool, EngineRequest("r", "m", [1, 2, 3]))
    await asked(link, 1)
    link.asked[0].error(EngineError("out of blocks", "unavailable"))
    await asked(link, 2)
    decode = link.asked[1]
    assert decode.request.token_ids == [1, 2, 3] and KV_TRANSFER not in decode.request.annotations
    decode.output(4)
    assert (await first).token_ids == [4]
    assert pool.stats.disagg == {("local", "prefill_failed"): 1}
    assert pool.routed("r").headers["x-rotor-worker"] == "d"  # type: ignore[union-attr]
    await stream.aclose()


async def test_a_decode_worker_that_fails_after_the_handover_releases_the_blocks() -> None:
    link, pool = pool_of("p:prefill", "d1:decode", "d2:decode", disagg=DisaggPolicy("always"))
    source = pool.generate(EngineRequest("r", "m", [1, 2]))
    sink: Recorder[EngineOutput] = Recorder()
    source.subscribe(sink)
    await asked(link, 1)
    link.asked[0].output(7, finish="length", kv_transfer=TRANSFER)
    link.asked[0].done()
    await asked(link, 2)
    link.asked[1].gone()  # before it fetched
    await asked(link, 3)
    assert link.released == [("p", "t1")]  # nobody will fetch them now
    again = link.asked[2]
    assert again.worker_id != link.asked[1].worker_id
    assert again.request.token_ids == [1, 2, 7] and KV_TRANSFER not in again.request.annotations
    assert sink.items == []
    again.output(8)
    await wait_for_async("two outputs", lambda: len(sink.items) == 2, TIMEOUT_S, pause=0)
    assert [o.token_ids for o in sink.items] == [[7], [8]]  # the held token still first
    source.stop()


async def test_a_first_token_that_ends_the_answer_is_not_held_and_nobody_fetches() -> None:
    link, pool = pool_of("p:prefill", "d:decode", disagg=DisaggPolicy("always"))
    request = EngineRequest("r", "m", [1, 2], stop=StopParams(max_tokens=1))
    source = pool.generate(request)
    # the choice's pipeline ends the answer at this token and stops the stream
    sink: Recorder[EngineOutput] = Recorder(lambda _sink, _out: source.stop())
    source.subscribe(sink)
    await asked(link, 1)
    link.asked[0].output(7, finish="length", kv_transfer=TRANSFER)
    link.asked[0].done()
    await wait_for_async("the answer", lambda: bool(sink.items), TIMEOUT_S, pause=0)
    for _ in range(5):
        await asyncio.sleep(0)
    assert tokens(sink.items) == [7] and len(link.asked) == 1  # no decode asked
    assert link.released == [("p", "t1")]  # its blocks freed at once


async def test_an_enforced_split_with_no_prefill_worker_is_a_503() -> None:
    link, pool = pool_of("d:decode", disagg=DisaggPolicy("load", enforce=True))
    with pytest.raises(EngineError, match="--enforce-disagg") as e:
        await pulled(pool.generate(EngineRequest("r", "m", [1]))).__anext__()
    assert (e.value.kind, e.value.cause) == ("unavailable", "no_worker")
    assert link.asked == [] and pool.stats.disagg[("refused", "enforced")] == 1


async def test_a_reader_that_leaves_mid_migration_ends_the_migration() -> None:
    link, pool = pool_of("a", "b", "c", migration_limit=3)
    stream, first = await read_first(pool, EngineRequest("r", "m", [1, 2, 3]))
    await asked(link, 1)
    link.asked[0].output(10)
    await first
    stream.subscribe(Outputs())
    link.asked[0].gone()
    await asked(link, 2)
    await wait_for_async("the new attempt sent", lambda: link.asked[1].sent, TIMEOUT_S, pause=0)
    second = link.asked[1].worker_id
    stream.stop()  # the client leaves while the new attempt is under way
    assert second in link.aborted  # the new attempt's worker is told at once
    assert not pool.load.in_flight  # the pool lets go of the attempt
    with pytest.raises(StopAsyncIteration):  # and the stream is over: no more attempts
        await stream.__anext__()
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(link.asked) == 2 and pool.routed("r") is None
