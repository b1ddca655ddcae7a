"""The load: a closed loop (N clients, each sending its next request when the
last one ends) or an open loop (requests arrive on a schedule whatever the
server's pace), each stopping after a number of requests or a duration.

Conversations of several turns run their turns one after another, each with the
server's earlier answers in its history; every turn is one request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from rotor.bench.client import Client
from rotor.bench.images import content
from rotor.bench.workload import Conversation


class Progress(Protocol):
    def started(self) -> None: ...
    def finished(self, record: dict[str, Any]) -> None: ...


class Budget:
    """How many more requests may start: a count, a deadline, or both."""

    def __init__(self, count: int | None, duration: float | None) -> None:
        self.count = count
        self.deadline = None if duration is None else time.perf_counter() + duration
        self.issued = 0

    def take(self) -> int | None:
        """The next request's index, or None once the budget is spent."""
        if self.count is not None and self.issued >= self.count:
            return None
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            return None
        self.issued += 1
        return self.issued - 1

    @property
    def spent(self) -> bool:
        if self.count is not None and self.issued >= self.count:
            return True
        return self.deadline is not None and time.perf_counter() >= self.deadline


@dataclass
class Run:
    """One level's raw outcome."""

    records: list[dict[str, Any]]
    duration_s: float
    max_in_flight: int


class Level:
    """Shared state of one level: the records, the clock origin, in-flight count."""

    def __init__(self, client: Client, budget: Budget, progress: Progress) -> None:
        self.client = client
        self.budget = budget
        self.progress = progress
        self.records: list[dict[str, Any]] = []
        self.origin = time.perf_counter()
        self.in_flight = 0
        self.max_in_flight = 0

    async def conversation(self, conv: Conversation, scheduled: float | None = None) -> None:
        """Its turns in order; a failed turn ends the conversation. `scheduled`:
        when the open loop meant its first turn to be sent (seconds from the start)."""
        messages: list[dict[str, Any]] = list(conv.history)
        for t, turn in enumerate(conv.turns):
            index = self.budget.take()
            if index is None:
                return
            messages.append({"role": "user", "content": content(turn.text, turn.images)})
            body = self.client.body(messages, turn.max_tokens)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.progress.started()
            record, reply = await self.client.send(body, self.origin)
            self.in_flight -= 1
            record = {
                "index": index,
                "conversation": conv.index,
                "turn": t,
                "max_tokens": turn.max_tokens,
                "scheduled_s": scheduled if t == 0 else None,
                "class": conv.tag,
                "images": len(turn.images),
                "image_bytes": sum(im.size for im in turn.images),
                "images_reused": sum(im.reused for im in turn.images),
                **record,
            }
            self.records.append(record)
            self.progress.finished(record)
            if record["error"]:
                return
            messages.append({"role": "assistant", "content": reply or "(empty)"})

    def result(self) -> Run:
        self.records.sort(key=lambda r: r["index"])
        end = max((r["start_s"] + r["e2e_s"] for r in self.records), default=0.0)
        return Run(self.records, end, self.max_in_flight)


async def closed_loop(
    client: Client,
    convs: Iterator[Conversation],
    concurrency: int,
    budget: Budget,
    progress: Progress,
) -> Run:
    """`concurrency` workers, each taking the next conversation when done."""
    level = Level(client, budget, progress)

    async def worker() -> None:
        while not budget.spent:
            await level.conversation(next(convs))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return level.result()


async def open_loop(
    client: Client,
    convs: Iterator[Conversation],
    arrivals: Iterable[float],
    budget: Budget,
    progress: Progress,
    max_concurrency: int | None = None,
) -> Run:
    """A conversation starts at each arrival offset (seconds from the start)
    until the budget is spent; `max_concurrency` caps how many run at once."""
    level = Level(client, budget, progress)
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    tasks: list[asyncio.Task[None]] = []

    async def start(conv: Conversation, scheduled: float) -> None:
        if gate is None:
            await level.conversation(conv, scheduled)
        else:
            async with gate:
                await level.conversation(conv, scheduled)

    for offset in arrivals:
        if budget.spent:
            break
        delay = level.origin + offset - time.perf_counter()
        await asyncio.sleep(max(delay, 0))  # 0 still lets started requests run
        tasks.append(asyncio.ensure_future(start(next(convs), offset)))
        if budget.count is not None and len(tasks) >= budget.count:
            break  # every request is either started or owned by a started conversation
    await asyncio.gather(*tasks)
    return level.result()
