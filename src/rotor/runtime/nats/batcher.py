"""A worker's messages, one NATS message per subject per step.

An engine step gives a token to every running request at once, and each
request's task used to publish its own message: 32 streams were 32 messages
a step, each one more publish, one more message for nats-server to route
and one more for the frontend to read; the engine's KV events were one
message per block. Here what is added for a subject (a frontend's stream
batches, the subject its requests named in their `rotor-steps` header; the
worker's KV events) waits until the event loop's current turn is over, then
goes as one message, made by the subject's `encode`: one message per
frontend per step, whatever the number of streams, and one for the KV
events. Everything closed at once is published at once, so nats-py writes
it to the socket in one write.

Order holds: a subject's items are added in order, batches go out in the
order they were closed, by one publisher task. A batch that grows past half
the server's max payload is closed at once, so no message outgrows what
NATS carries. A subject may have a reply subject (`reply_of`): nobody
answers a batch, but NATS says "no responders" there when nobody reads the
subject any more.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client

log = logging.getLogger("rotor.worker")

# The share of the server's max payload after which a batch is closed.
FILL = 0.5

Encode = Callable[[list[Any]], bytes]


@dataclass(slots=True)
class _Batch:
    items: list[Any]
    size: int  # about this many bytes once encoded
    encode: Encode


class StepBatcher:
    def __init__(self, nc: Client, reply_of: Callable[[str], str] | None = None) -> None:
        """`reply_of(subject)`: the reply subject its batches carry ("": none)."""
        self._nc = nc
        self._reply_of = reply_of
        self._open: dict[str, _Batch] = {}  # subject → its batch of this turn
        self._closed: collections.deque[tuple[str, _Batch]] = collections.deque()
        self._turn_end_due = False
        self._ready = asyncio.Event()  # batches are closed and waiting
        self._idle = asyncio.Event()  # nothing closed is waiting or being published
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._publish_forever(), name="step-batches")

    async def stop(self) -> None:
        """Send what is waiting, then stop: what is added later is dropped."""
        if self._task is None:
            return
        await self.flush()
        task, self._task = self._task, None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    def add(self, subject: str, item: Any, size: int, encode: Encode) -> None:
        """One item (of about `size` bytes once encoded) for `subject`'s next
        message, which `encode` makes of all its items, in order."""
        if self._task is None:
            return  # not started, or stopped: nobody would send it
        batch = self._open.get(subject)
        if batch is None:
            batch = self._open[subject] = _Batch([], 0, encode)
        batch.items.append(item)
        batch.size += size
        if batch.size >= FILL * self._nc.max_payload:
            self._close(subject)
        if not self._turn_end_due:
            self._turn_end_due = True
            asyncio.get_running_loop().call_soon(self._turn_end)

    async def flush(self) -> None:
        """Until everything added so far has been published."""
        self._turn_end()
        await self._idle.wait()

    def _turn_end(self) -> None:
        self._turn_end_due = False
        for subject in list(self._open):
            self._close(subject)

    def _close(self, subject: str) -> None:
        self._closed.append((subject, self._open.pop(subject)))
        self._idle.clear()
        self._ready.set()

    async def _publish_forever(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._closed:
                subject, batch = self._closed.popleft()
                reply = self._reply_of(subject) if self._reply_of is not None else ""
                try:
                    await self._nc.publish(subject, batch.encode(batch.items), reply=reply)
                except Exception as e:  # lost: the readers see the gap, or silence
                    log.warning(
                        "a batch of %d messages to %s was not sent: %s",
                        len(batch.items),
                        subject,
                        e,
                    )
            self._idle.set()
