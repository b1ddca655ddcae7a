"""One engine request on a remote worker, seen from the frontend.

`ResponseRouter` is the frontend's one subscription to all its requests'
outputs (`rotor.resp.<frontend>.*`), handing each message to its request's
`RemoteStream`. A stream checks sequence numbers (a lost or repeated message
is an error, never passed on), merges what piled up while its consumer was
busy into as few outputs as possible, and turns silence into an error: no
message at all for `SILENCE_S` (the worker process is gone), no output for
`request_timeout` (the worker is stuck), or the worker's lease gone.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import AsyncIterator

from nats.aio.client import Client
from nats.aio.msg import Msg

from rotor.protocol import codec
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest, merge_outputs
from rotor.runtime import subjects, wire

log = logging.getLogger("rotor.remote")

DEFAULT_REQUEST_TIMEOUT_S = 30.0


class RemoteStream:
    __slots__ = ("_items", "_ready", "_expect", "gone")

    def __init__(self) -> None:
        self._items: collections.deque[bytes | EngineError] = collections.deque()
        self._ready = asyncio.Event()
        self._expect = 0
        self.gone = False

    def put(self, data: bytes) -> None:
        self._items.append(data)
        self._ready.set()

    def fail(self, error: EngineError) -> None:
        """The worker is known to be gone (its lease ended): end with `error`."""
        self._items.append(error)
        self._ready.set()

    async def take(self, timeout: float) -> list[bytes | EngineError]:
        """Everything that arrived; raises TimeoutError after `timeout` of nothing.

        Not `asyncio.wait_for`: before Python 3.12 it returns the result when
        the wait ends in the same turn as a cancel, swallowing the cancel (a
        client that left then kept its stream running to the end). A timer
        that wakes the same event also costs no task per message."""
        if not self._items:
            self._ready.clear()
            timer = asyncio.get_running_loop().call_later(timeout, self._ready.set)
            try:
                await self._ready.wait()
            finally:
                timer.cancel()
            if not self._items:
                raise asyncio.TimeoutError
        items = list(self._items)
        self._items.clear()
        return items

    def check(self, seq: int) -> bool:
        """True for the next message; False for a repeat (dropped); a gap raises."""
        if seq == self._expect:
            self._expect += 1
            return True
        if seq < self._expect:
            log.warning("dropped a repeated stream message (seq %d)", seq)
            return False
        raise EngineError(
            f"lost stream messages {self._expect}..{seq - 1} from the worker", "unavailable"
        )


class ResponseRouter:
    """The frontend's inbox for every remote request's outputs."""

    def __init__(self, nc: Client, frontend_id: str | None = None) -> None:
        self.nc = nc
        self.frontend_id = frontend_id or uuid.uuid4().hex[:12]
        self._streams: dict[str, RemoteStream] = {}
        self._by_worker: dict[str, set[str]] = {}
        self._sub = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(subjects.responses(self.frontend_id), cb=self._on_msg)

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:
                pass

    async def _on_msg(self, msg: Msg) -> None:
        rid = msg.subject.rsplit(".", 1)[-1]
        stream = self._streams.get(rid)
        if stream is not None:
            stream.put(msg.data)

    def worker_gone(self, worker_id: str) -> None:
        for rid in self._by_worker.pop(worker_id, set()):
            stream = self._streams.get(rid)
            if stream is not None:
                stream.fail(EngineError(f"worker {worker_id} is gone", "unavailable"))

    async def generate(
        self, worker_id: str, request: EngineRequest, request_timeout: float
    ) -> AsyncIterator[EngineOutput]:
        """`request` on `worker_id`, its outputs as they come. Closing this
        early aborts the request on the worker."""
        rid = request.request_id
        stream = RemoteStream()
        self._streams[rid] = stream
        self._by_worker.setdefault(worker_id, set()).add(rid)
        finished = False
        try:
            await self.nc.publish(
                subjects.generate(worker_id),
                codec.encode_request(request),
                reply=subjects.response(self.frontend_id, rid),
            )
            last_output = time.monotonic()
            while True:
                try:
                    items = await stream.take(wire.SILENCE_S)
                except asyncio.TimeoutError:
                    raise EngineError(
                        f"worker {worker_id} stopped answering", "unavailable"
                    ) from None
                outputs: list[EngineOutput] = []
                for item in items:
                    if isinstance(item, EngineError):
                        raise item
                    seq, kind, payload = _parse(item)
                    if not stream.check(seq):
                        continue
                    if kind == wire.OUTPUTS and payload is not None:
                        outputs.extend(codec.decode_outputs(payload))
                    elif kind == wire.ERROR and payload is not None:
                        finished = True
                        for out in merge_outputs(outputs):
                            yield out
                        raise codec.decode_error(payload)
                    elif kind == wire.DONE:
                        finished = True
                if outputs:
                    last_output = time.monotonic()
                    for out in merge_outputs(outputs):
                        yield out
                if finished:
                    return
                if time.monotonic() - last_output > request_timeout:
                    raise EngineError(
                        f"worker {worker_id} sent no output for {request_timeout:.0f} s",
                        "unavailable",
                    )
        finally:
            self._streams.pop(rid, None)
            ids = self._by_worker.get(worker_id)
            if ids is not None:
                ids.discard(rid)
            if not finished:
                try:
                    await self.nc.publish(subjects.abort(worker_id), rid.encode())
                except Exception:
                    pass

    def abort(self, worker_id: str, request_id: str) -> None:
        asyncio.get_running_loop().create_task(
            self.nc.publish(subjects.abort(worker_id), request_id.encode())
        )


def _parse(data: bytes) -> tuple[int, str, bytes | None]:
    try:
        return wire.parse(data)
    except ValueError as e:
        raise EngineError(str(e), "internal") from None
