"""Background responses (`background: true`): each runs as a task of the
frontend that took it, through the same start (admission, routing) and the
same collected events as any response, and keeps its record up to date:
`queued` when taken, `in_progress` once it started, then `completed`,
`incomplete`, `failed` (with its error) or `cancelled`.

A cancel stops the engine's work the way a client that leaves does: the
task is cancelled, which closes the response's events. A cancel that reaches
another frontend (its store shared) leaves a marker in the store; the
frontend running the response looks for one every `poll_s` seconds. A
response deleted while it runs is stopped and stays deleted. When the server
stops, the responses it still runs end `failed`, saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from rotor.api.errors import INTERNAL_ERROR, APIError, api_error
from rotor.api.observe import observed
from rotor.api.respond import Responder
from rotor.api.responses.convert import PARAMS
from rotor.api.responses.items import response, response_body
from rotor.api.responses.record import Record
from rotor.api.responses.stored import Stored
from rotor.frontend import ModelEntry
from rotor.pipeline.collected import collect
from rotor.pipeline.events import ResponseFailed
from rotor.protocol.openai import ChatCompletionRequest

log = logging.getLogger("rotor.api")

ENDPOINT = "responses"
POLL_S = 0.5  # how often a running response looks for a cancel asked elsewhere
CANCEL_WAIT_S = 10.0  # how long a cancel asked elsewhere waits to see the response end
STOPPED = "the server stopped before the response finished"


@dataclass
class Job:
    """One background response: its request as chat, its model, and its record as queued."""

    tenant: str
    rid: str
    chat: ChatCompletionRequest
    entry: ModelEntry
    head: dict[str, Any]  # the response object's fields that echo the request
    input: list[dict[str, Any]]  # the record's conversation
    cancel_seen: bool = field(default=False)

    @property
    def id(self) -> str:
        return str(self.head["id"])

    def record(self, status: str, output: list[dict[str, Any]], **fields: Any) -> Record:
        return Record(response(self.head, status, output, **fields), self.input)


class _Deleted(Exception):
    """The response's record was deleted while it ran: it stops, unrecorded."""


class Background:
    """The background responses this frontend runs, by tenant and id."""

    def __init__(self, responder: Responder, stored: Stored, poll_s: float = POLL_S) -> None:
        self.responder = responder
        self.stored = stored
        self.poll_s = poll_s
        self._running: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._stopping = False

    def start(self, job: Job) -> None:
        """Runs `job` (its record, `queued`, is stored already)."""
        self._running[(job.tenant, job.id)] = asyncio.ensure_future(self._run(job))

    async def halt(self, tenant: str, response_id: str) -> bool:
        """Stops the response if this frontend runs it, and waits till its
        record says how it ended; False when it runs elsewhere or has ended."""
        task = self._running.get((tenant, response_id))
        if task is None:
            return False
        task.cancel()
        await asyncio.wait({task})
        return True

    async def cancel(self, tenant: str, response_id: str) -> Record | None:
        """Stops the response wherever it runs: here at once; elsewhere by a
        marker its frontend looks for, waiting up to CANCEL_WAIT_S for its
        record to end. The record as it is then (None: deleted meanwhile);
        it may still be running when its frontend is gone or slow to see."""
        if await self.halt(tenant, response_id):
            return await self.stored.find(tenant, response_id)
        await self.stored.ask_cancel(tenant, response_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CANCEL_WAIT_S
        while True:
            record = await self.stored.find(tenant, response_id)
            if record is None or record.finished:
                await self.stored.cancel_done(tenant, response_id)
                return record
            if loop.time() >= deadline:
                return record
            await asyncio.sleep(self.poll_s / 5)

    async def stop(self) -> None:
        """The server stops: every running response ends, stored as failed."""
        self._stopping = True
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, job: Job) -> None:
        task = asyncio.current_task()
        assert task is not None
        watch = asyncio.ensure_future(self._watch(job, task))
        end: Record | None = None
        try:
            end = await self._generate(job)
        except asyncio.CancelledError:
            if self._stopping:
                end = self._failed(job, APIError(503, STOPPED))
            else:
                end = job.record("cancelled", [])
        except _Deleted:
            pass
        except (APIError, ResponseFailed) as e:
            end = self._failed(job, api_error(e, PARAMS, self.responder.overload_status))
        except Exception as e:  # a bug: logged, and the response says it failed
            log.error("background response %s failed: %s", job.id, e, exc_info=e)
            end = self._failed(job, APIError(500, INTERNAL_ERROR))
        finally:
            watch.cancel()
            # from here a cancel finds it ended (its end is being written)
            del self._running[(job.tenant, job.id)]
        if end is not None:
            try:
                await self.stored.update(job.tenant, end)
            except APIError as e:
                log.error(
                    "background response %s was not stored %s: %s", job.id, end.status, e.message
                )
        if job.cancel_seen:
            await self.stored.cancel_done(job.tenant, job.id)

    async def _generate(self, job: Job) -> Record:
        responder = self.responder
        t0 = time.perf_counter()
        resp = await responder.start(
            responder.frontend.chat, job.chat, job.rid, ENDPOINT, PARAMS, None, job.entry
        )
        try:
            if not await self.stored.update(job.tenant, job.record("in_progress", [])):
                raise _Deleted
            events = observed(resp, responder.metrics, ENDPOINT, False, t0)
            try:
                choices = await collect(events, resp.n)
            finally:
                await events.aclose()
        finally:
            await resp.events.aclose()
        body = response_body(job.head, job.rid, choices[0], resp.usage)
        return Record(body, job.input)

    def _failed(self, job: Job, error: APIError) -> Record:
        code = "invalid_prompt" if error.status < 500 else "server_error"
        return job.record("failed", [], error={"code": code, "message": error.message})

    async def _watch(self, job: Job, task: asyncio.Task[None]) -> None:
        """Cancels `task` once a cancel of its response is asked at another frontend."""
        while True:
            await asyncio.sleep(self.poll_s)
            if await self.stored.cancel_asked(job.tenant, job.id):
                job.cancel_seen = True
                task.cancel()
                return
