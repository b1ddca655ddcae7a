"""The virtual connector over a real nats-server: a task plays the external
system (it watches the decision keys and writes the acks), so each test sees
the protocol from both sides, as the module docstring of virtual.py says it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats as nats_py
import pytest
from nats.aio.client import Client
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from rotor.planner.connectors import ConnectorError
from rotor.planner.connectors.virtual import VirtualConnector, ack_key, decision_key
from rotor.planner.observation import WorkerLoad
from rotor.runtime.nats import subjects

from support.cluster import Nats, nats_server


@pytest.fixture(scope="module")
def nats() -> Iterator[Nats]:
    with nats_server() as server:
        yield server


@pytest.fixture
async def nc(nats: Nats) -> AsyncIterator[Client]:
    client = await nats_py.connect(nats.url)
    yield client
    await client.close()


class ExternalSystem:
    """What scales the fleet for the planner: each decision it sees on the
    model's decision keys, it records and acknowledges (or refuses)."""

    def __init__(self, nc: Client, token: str, error: str | None = None) -> None:
        self.nc = nc
        self.token = token
        self.error = error
        self.decisions: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None
        self._watcher: Any = None

    async def start(self) -> None:
        kv = await self._bucket()
        self._watcher = await kv.watch(f"{self.token}.*.decision")
        self._task = asyncio.create_task(self._act(kv))

    async def _bucket(self) -> KeyValue:
        js = self.nc.jetstream()
        try:
            return await js.key_value(subjects.PLANNER_BUCKET)
        except BucketNotFoundError:
            return await js.create_key_value(bucket=subjects.PLANNER_BUCKET, history=1)

    async def _act(self, kv: KeyValue) -> None:
        async for entry in self._watcher:
            if entry is None:  # the end of what was there before
                continue
            decision = json.loads(entry.value)
            self.decisions.append(decision)
            ack: dict[str, Any] = {"id": decision["id"]}
            if self.error:
                ack["error"] = self.error
            pool = entry.key.split(".")[1]
            await kv.put(f"{self.token}.{pool}.ack", json.dumps(ack).encode())

    async def stop(self) -> None:
        await self._watcher.stop()
        assert self._task is not None
        await asyncio.wait_for(self._task, 5)


def worker(worker_id: str) -> WorkerLoad:
    return WorkerLoad(worker_id=worker_id, pool="decode", address="host:1")


async def test_a_decision_returns_once_acknowledged(nc: Client) -> None:
    external = ExternalSystem(nc, "acked")
    await external.start()
    connector = VirtualConnector(nc, "acked", ack_timeout=10)
    await connector.start()
    try:
        assert await connector.replicas("decode") is None
        before = time.time()
        await connector.scale("decode", 3, [])
        assert await connector.replicas("decode") == 3
        await connector.scale("decode", 1, [worker("w2"), worker("w1")])
        assert await connector.replicas("decode") == 1
        await connector.scale("prefill", 2, [])
    finally:
        await connector.stop()
        await external.stop()
    first, second, other = external.decisions
    assert {k: v for k, v in first.items() if k != "at"} == {
        "id": 1,
        "model": "acked",
        "pool": "decode",
        "target": 3,
        "drain": [],
    }
    assert before - 1 <= first["at"] <= time.time() + 1
    assert (second["id"], second["target"], second["drain"]) == (2, 1, ["w2", "w1"])
    assert (other["id"], other["pool"], other["target"]) == (1, "prefill", 2)  # ids per pool


async def test_a_restarted_planner_continues_the_ids(nc: Client) -> None:
    external = ExternalSystem(nc, "restarted")
    await external.start()
    try:
        first = VirtualConnector(nc, "restarted", ack_timeout=10)
        await first.start()
        await first.scale("agg", 2, [])
        await first.scale("agg", 4, [])
        await first.stop()

        second = VirtualConnector(nc, "restarted", ack_timeout=10)
        await second.start()
        try:
            assert await second.replicas("agg") == 4  # the last acknowledged target
            assert await second.replicas("decode") is None
            await second.scale("agg", 5, [])
            assert await second.replicas("agg") == 5
        finally:
            await second.stop()
    finally:
        await external.stop()
    assert [d["id"] for d in external.decisions] == [1, 2, 3]


async def test_no_ack_is_an_error_after_the_timeout(nc: Client) -> None:
    connector = VirtualConnector(nc, "unheard", ack_timeout=0.5)
    await connector.start()
    try:
        start = time.monotonic()
        with pytest.raises(ConnectorError) as caught:
            await connector.scale("prefill", 2, [])
        assert time.monotonic() - start >= 0.5
        assert str(caught.value).startswith(
            "virtual: decision 1 for pool prefill (target 2) not acknowledged in 0.5 s "
            "on key unheard.prefill.ack"
        )
        assert await connector.replicas("prefill") is None
        # the next decision has the next id, and the external system saw the last one
        with pytest.raises(ConnectorError, match="decision 2 for pool prefill"):
            await connector.scale("prefill", 3, [])
        kv = await nc.jetstream().key_value(subjects.PLANNER_BUCKET)
        entry = await kv.get("unheard.prefill.decision")
        assert json.loads(entry.value or b"")["id"] == 2
    finally:
        await connector.stop()


async def test_a_late_ack_still_counts(nc: Client) -> None:
    connector = VirtualConnector(nc, "late", ack_timeout=0.2)
    await connector.start()
    try:
        with pytest.raises(ConnectorError, match="not acknowledged"):
            await connector.scale("agg", 6, [])
        kv = await nc.jetstream().key_value(subjects.PLANNER_BUCKET)
        await kv.put("late.agg.ack", json.dumps({"id": 1}).encode())
        while (
            await connector.replicas("agg") != 6
        ):  # the ack watch brings it (a test timeout guards)
            await asyncio.sleep(0.01)
    finally:
        await connector.stop()


async def test_a_refused_decision_is_an_error(nc: Client) -> None:
    external = ExternalSystem(nc, "refused", error="quota exceeded")
    await external.start()
    connector = VirtualConnector(nc, "refused", ack_timeout=10)
    await connector.start()
    try:
        with pytest.raises(ConnectorError, match="decision 1 for pool agg .* refused: quota"):
            await connector.scale("agg", 9, [])
        assert await connector.replicas("agg") is None
    finally:
        await connector.stop()
        await external.stop()


async def test_model_names_become_one_key_token(nc: Client) -> None:
    model = "Qwen/Qwen3-0.6B:int8 v2"
    assert decision_key(model, "decode") == "Qwen_Qwen3-0_6B_int8_v2.decode.decision"
    assert ack_key(model, "agg") == "Qwen_Qwen3-0_6B_int8_v2.agg.ack"
    external = ExternalSystem(nc, "Qwen_Qwen3-0_6B_int8_v2")
    await external.start()
    connector = VirtualConnector(nc, model, ack_timeout=10)
    await connector.start()
    try:
        await connector.scale("decode", 2, [])
    finally:
        await connector.stop()
        await external.stop()
    [decision] = external.decisions
    assert decision["model"] == model  # the payload keeps the real name


async def test_the_bucket_is_made_if_missing_and_kept_at_stop() -> None:
    with nats_server() as fresh:
        client = await nats_py.connect(fresh.url)
        try:
            js = client.jetstream()
            with pytest.raises(BucketNotFoundError):
                await js.key_value(subjects.PLANNER_BUCKET)
            connector = VirtualConnector(client, "m")
            await connector.start()
            await connector.stop()
            kv = await js.key_value(subjects.PLANNER_BUCKET)
            status = await kv.status()
            assert (status.bucket, status.history) == (subjects.PLANNER_BUCKET, 1)
        finally:
            await client.close()


def test_a_model_name_is_needed() -> None:
    with pytest.raises(ValueError, match="model name"):
        VirtualConnector(None, "")  # type: ignore[arg-type]
