"""`rotor planner --connector virtual`: the planner decides, an external system
scales. They meet in the NATS KV bucket `rotor_planner` (subjects.PLANNER_BUCKET),
two keys per pool P of model M, where `<m>` is M with every character outside
`[A-Za-z0-9_-]` replaced by `_` (the payload keeps M as it is):

- `<m>.<P>.decision`, written by the planner:
  `{"id": n, "model": M, "pool": P, "target": T, "drain": [worker ids], "at": unix s}`.
  `id` grows by one per decision of the pool; `drain` (scaling down) names the
  workers to remove, least loaded first.
- `<m>.<P>.ack`, written by the external system once it has acted:
  `{"id": n}`, or `{"id": n, "error": "why"}` to refuse decision n.

The external system watches `*.*.decision` (or `<m>.*.decision`), scales the
pool to `target`, and writes the ack with the decision's id. The planner waits
for an ack with an id at least n (an ack covers every decision before it), up
to `ack_timeout` seconds. A planner that restarts continues the ids from the
bucket; the bucket is never deleted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any

from nats.aio.client import Client
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from rotor.planner.connectors import ConnectorError
from rotor.planner.observation import POOLS, PoolName, WorkerLoad
from rotor.runtime.nats import subjects

log = logging.getLogger("rotor.planner")

UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def model_token(model: str) -> str:
    """The model's name as one key token: `Qwen/Qwen3-0.6B` -> `Qwen_Qwen3-0_6B`."""
    return UNSAFE.sub("_", model)


def decision_key(model: str, pool: PoolName) -> str:
    return f"{model_token(model)}.{pool}.decision"


def ack_key(model: str, pool: PoolName) -> str:
    return f"{model_token(model)}.{pool}.ack"


class VirtualConnector:
    name = "virtual"

    def __init__(self, nc: Client, model: str, ack_timeout: float = 60.0) -> None:
        if not model:
            raise ValueError("the virtual connector needs a model name")
        self.nc = nc
        self.model = model
        self.ack_timeout = ack_timeout
        self._kv: KeyValue | None = None
        self._watcher: Any = None  # nats-py's KeyWatcher on this model's acks
        self._pump: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()
        self._last_id: dict[PoolName, int] = {}  # the last decision's id, per pool
        self._sent: dict[PoolName, dict[int, int]] = {}  # decisions not yet acked: id -> target
        self._acked: dict[PoolName, int] = {}  # the highest id acknowledged
        self._refused: dict[PoolName, tuple[int, str]] = {}  # the last ack with an error
        self._replicas: dict[PoolName, int] = {}

    async def start(self) -> None:
        js = self.nc.jetstream()
        try:
            self._kv = await js.key_value(subjects.PLANNER_BUCKET)
        except (BucketNotFoundError, NotFoundError):
            self._kv = await js.create_key_value(bucket=subjects.PLANNER_BUCKET, history=1)
        for pool in POOLS:
            decision = await self._read(decision_key(self.model, pool))
            if decision is not None:
                self._last_id[pool] = int(decision["id"])
                self._sent[pool] = {int(decision["id"]): int(decision["target"])}
        # the acks so far come first (up to nats-py's None marker), then each new one
        self._watcher = await self._kv.watch(f"{model_token(self.model)}.*.ack")
        async for entry in self._watcher:
            if entry is None:
                break
            self._on_ack(entry)
        self._pump = asyncio.create_task(self._follow_acks())

    async def replicas(self, pool: PoolName) -> int | None:
        """The target of the last decision acknowledged; None if none is known."""
        return self._replicas.get(pool)

    async def scale(self, pool: PoolName, target: int, drain: list[WorkerLoad]) -> None:
        if self._kv is None:
            raise ConnectorError("virtual: the connector is not started")
        n = max(self._last_id.get(pool, 0), self._acked.get(pool, 0)) + 1
        key = decision_key(self.model, pool)
        decision = {
            "id": n,
            "model": self.model,
            "pool": pool,
            "target": target,
            "drain": [w.worker_id for w in drain],
            "at": time.time(),
        }
        self._sent.setdefault(pool, {})[n] = target
        try:
            await self._kv.put(key, json.dumps(decision).encode())
        except Exception as e:
            self._sent[pool].pop(n, None)
            raise ConnectorError(f"virtual: cannot write decision {n} to key {key}: {e}") from e
        self._last_id[pool] = n

        def answered() -> bool:
            return self._acked.get(pool, 0) >= n or self._pump is None or self._pump.done()

        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(answered), self.ack_timeout)
        except asyncio.TimeoutError:
            raise ConnectorError(
                f"virtual: decision {n} for pool {pool} (target {target}) not acknowledged in "
                f"{self.ack_timeout:g} s on key {ack_key(self.model, pool)} "
                f"(bucket {subjects.PLANNER_BUCKET})"
            ) from None
        if self._acked.get(pool, 0) < n:
            raise ConnectorError(f"virtual: stopped following key {ack_key(self.model, pool)}")
        refused = self._refused.get(pool)
        if refused is not None and refused[0] >= n:
            raise ConnectorError(
                f"virtual: decision {n} for pool {pool} (target {target}) refused: {refused[1]}"
            )

    async def stop(self) -> None:
        """Stops following the acks; the bucket and its keys stay."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            try:
                await watcher.stop()
            except Exception as e:  # NATS already gone
                log.debug("virtual: could not stop the ack watch: %s", e)
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
            self._pump = None
        self._kv = None

    async def _follow_acks(self) -> None:
        assert self._watcher is not None
        try:
            async for entry in self._watcher:
                if entry is not None:
                    self._on_ack(entry)
                async with self._changed:
                    self._changed.notify_all()
        finally:  # a waiting scale() learns that no ack will come
            async with self._changed:
                self._changed.notify_all()

    def _on_ack(self, entry: Any) -> None:
        """One value of a `<m>.<P>.ack` key: the pool's replicas, if it names a decision we know."""
        pool = entry.key.split(".")[-2]
        if pool not in POOLS or entry.operation is not None:  # a delete or purge
            return
        try:
            ack = json.loads(entry.value or b"")
            n = int(ack["id"])
        except (ValueError, TypeError, KeyError) as e:
            log.warning("virtual: ignoring a malformed ack on %s: %s", entry.key, e)
            return
        if n <= self._acked.get(pool, 0):
            return
        self._acked[pool] = n
        sent = self._sent.get(pool, {})
        covered = [i for i in sent if i <= n]
        if ack.get("error"):
            self._refused[pool] = (n, str(ack["error"]))
            log.warning("virtual: pool %s: decision %d refused: %s", pool, n, ack["error"])
        elif covered:
            self._replicas[pool] = sent[max(covered)]
        for i in covered:
            del sent[i]

    async def _read(self, key: str) -> dict[str, Any] | None:
        assert self._kv is not None
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        try:
            value = json.loads(entry.value or b"")
            if not isinstance(value, dict):
                raise TypeError("not a JSON object")
            int(value["id"]), int(value["target"])
        except (ValueError, TypeError, KeyError) as e:
            log.warning("virtual: ignoring a malformed %s: %s", key, e)
            return None
        return value
