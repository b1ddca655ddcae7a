"""A worker sends a frontend's streams in batches (runtime/nats/batcher.py):
over a real nats-server, a step of many streams is one message to the
frontend, never one per token; a frontend that does not ask for batches
still gets one message per output; a step's KV events are one message; and
a batch that cannot be read fails only what it names."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Iterator

import msgpack
import nats as nats_py
import pytest

from rotor.protocol import codec
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest, StopParams, pulled
from rotor.protocol.kv import BlocksStored, KVEvent
from rotor.runtime.nats import messages as wire
from rotor.runtime.nats import subjects
from rotor.runtime.nats.request_plane import RequestPlane
from rotor.runtime.nats.worker import WorkerService
from rotor.runtime.stream import OutputStream

from support.cluster import Nats, nats_server
from support.mocker import TOK, MakeEngine, collect, ids_of, request
from support.wait import wait_for_async

STORY = " ".join(f"word{i}" for i in range(40))


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


class Counted:
    """Every message on the subjects a test watches, by subject."""

    def __init__(self) -> None:
        self.by_subject: collections.Counter[str] = collections.Counter()
        self.data: dict[str, list[bytes]] = collections.defaultdict(list)

    async def see(self, msg: nats_py.aio.msg.Msg) -> None:
        self.by_subject[msg.subject] += 1
        self.data[msg.subject].append(msg.data)


@pytest.fixture
async def served(nats: Nats, make_engine: MakeEngine) -> AsyncIterator[tuple]:
    """A worker (a mocker a step at a time), a frontend's request plane, and a
    third connection that counts what goes by."""
    conns = [await nats_py.connect(nats.url) for _ in range(3)]
    engine = await make_engine()
    worker = WorkerService(conns[0], engine, TOK)
    await worker.start()
    plane = RequestPlane(conns[1])
    await plane.start()
    counted = Counted()
    await conns[2].subscribe("rotor.>", cb=counted.see)
    try:
        yield engine, worker, plane, counted, conns[2]
    finally:
        await plane.stop()
        await worker.stop()
        for nc in conns:
            await nc.close()


async def test_a_step_of_many_streams_is_one_message(served: tuple) -> None:
    engine, worker, plane, counted, _ = served
    jobs = [request({"output": STORY, "end": "length"}) for _ in range(8)]

    async def run(job: EngineRequest) -> list[EngineOutput]:
        return [out async for out in pulled(plane.generate(worker.worker_id, job, 30))]

    answers = await asyncio.gather(*(run(job) for job in jobs))
    whole = await collect(engine, request({"output": STORY, "end": "length"}))
    for outs in answers:
        assert ids_of(outs) == ids_of(whole)
    tokens = len(ids_of(whole))
    batches = counted.by_subject[subjects.steps(plane.frontend_id)]
    # One message per step (and a few more per stream: its first output,
    # what was ready when the engine began to push it, and its end may go
    # in turns of their own), for all eight streams: never one per token
    # per stream (that would be eight times as many).
    assert batches <= tokens + 3 * len(jobs)
    assert not any(s.startswith("rotor.resp.") for s in counted.by_subject)
    entries = [
        e for data in counted.data[subjects.steps(plane.frontend_id)] for e in msgpack.unpackb(data)
    ]
    assert len(entries) >= 8 * tokens  # every token of every stream went in a batch


async def test_a_frontend_that_asks_no_batches_gets_a_message_per_output(served: tuple) -> None:
    engine, worker, _, counted, nc = served
    script = {"output": "a short answer", "end": "length"}
    outputs = len(await collect(engine, request(script)))
    job = request(script)
    inbox = nc.new_inbox()
    replies: asyncio.Queue[bytes] = asyncio.Queue()

    async def got(msg: nats_py.aio.msg.Msg) -> None:
        replies.put_nowait(msg.data)

    await nc.subscribe(inbox, cb=got)
    await nc.publish(subjects.generate(worker.worker_id), codec.encode_request(job), reply=inbox)
    kinds = []
    while not kinds or kinds[-1] != wire.DONE:
        seq, kind, payload = wire.parse(await asyncio.wait_for(replies.get(), 10))
        assert seq == len(kinds)
        kinds.append(kind)
        if kind == wire.OUTPUTS:  # every output a map, as such a frontend reads them
            assert all(type(item) is dict for item in msgpack.unpackb(payload or b""))
    assert kinds == [wire.OUTPUTS] * outputs + [wire.DONE]
    assert not any(s.startswith(subjects.STEPS_PREFIX) for s in counted.by_subject)


async def test_a_steps_kv_events_are_one_message(served: tuple) -> None:
    engine, worker, plane, counted, _ = served
    # Two prompts with no block in common, sent at once: a step that
    # stores blocks of both has an event for each.
    jobs = [
        request(
            {"output": STORY},
            prompt=f"<|im_start|>user\n{who} "
            + " ".join(f"block-{i}." for i in range(80))
            + "<|im_end|>\n",
            stop=StopParams(max_tokens=3),
        )
        for who in ("alice", "bob")
    ]

    async def run(job: EngineRequest) -> list[EngineOutput]:
        return [out async for out in pulled(plane.generate(worker.worker_id, job, 30))]

    assert all(await asyncio.gather(*(run(job) for job in jobs)))
    subject = subjects.kv_events(worker.worker_id)
    blocks = len(engine.scheduler.kv.hash_to_block)

    def events() -> list[KVEvent]:
        return [e for data in counted.data[subject] for e in codec.decode_kv_events(data)]

    def stored() -> int:
        return sum(len(e.block_hashes) for e in events() if type(e) is BlocksStored)

    await wait_for_async("every stored block's event", lambda: stored() >= blocks, 10)
    got = events()
    assert [e.event_id for e in got] == list(range(1, len(got) + 1))
    assert stored() == blocks
    # the step that stored both prompts' blocks sent their events as one message
    assert max(len(codec.decode_kv_events(data)) for data in counted.data[subject]) > 1


def test_kv_events_encode_alone_as_before_and_several_as_an_array() -> None:
    one = BlocksStored(1, [5, 6], None, 16)
    two = BlocksStored(2, [7], 6, 16)
    assert codec.encode_kv_events([one]) == codec.encode_kv_event(one)
    assert codec.decode_kv_events(codec.encode_kv_event(one)) == [one]
    assert codec.decode_kv_events(codec.encode_kv_events([one, two])) == [one, two]


async def test_a_batch_fails_only_the_streams_it_names_badly() -> None:
    async def send() -> None:
        pass

    def stream() -> OutputStream:
        return OutputStream(1, "w", send, abort=lambda: None)

    good, bad, other = stream(), stream(), stream()
    streams = {"good": good, "bad": bad, "other": other}
    out = codec.encode_outputs([EngineOutput(token_ids=[1, 2], finish="length")])
    data = msgpack.packb(
        [
            ["good", 0, wire.OUTPUTS, out],
            ["bad", 0, "zz", None],  # an unknown kind: that stream ends broken
            ["gone", 0, wire.OUTPUTS, out],  # a request nobody reads: skipped
            [1, 2],  # not an entry at all: dropped
            ["good", 1, wire.DONE, None],
        ]
    )
    wire.put_batch(data, streams)
    wire.put_batch(b"\xc1junk", streams)  # unreadable: nothing named, nothing failed

    async def read(s: OutputStream) -> list[EngineOutput]:
        return [o async for o in pulled(s)]

    assert ids_of(await read(good)) == [1, 2]
    with pytest.raises(EngineError, match="not a stream message"):
        await read(bad)
    other.put(0, "done", None)
    assert await read(other) == []
