"""One request over a pool's workers: `PoolStream`, the pool's engine
stream (a Source of engine outputs), and the Sink of its current attempt.

Its steps, each a method of its own:

- `_begin`: route the request (the pool's router); when the model has
  prefill workers, place its prefill (router/handover.py) and, when that is
  remote, run it first (`_prefill_first`): its first token is held until the
  decode worker's first output, so the handover is part of the time to the
  first token, never a gap between two tokens (as in vLLM's and Dynamo's
  proxies);
- `_open`: one attempt: the request sent to one worker (counted in the
  pool's local load, under a span of its own), its stream subscribed;
- `put`: each output of the attempt, counted (router/migration.Progress),
  handed on in the worker stream's own turn;
- `end` → `_failed`: an attempt that failed with an "unavailable" error
  moves to another worker (`_migrate`: the tokens so far become part of the
  prompt), up to the pool's migration limit, so the reader sees one
  uninterrupted stream; any other end is the stream's.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rotor import tracing
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest, EngineStream
from rotor.protocol.flow import Sink, broken
from rotor.protocol.routing import Routed
from rotor.router import handover, migration
from rotor.router.disagg import Placement
from rotor.router.modes import Pick
from rotor.router.spans import attempt_span
from rotor.tracing import Span

if TYPE_CHECKING:
    from rotor.router.pool import Pool

log = logging.getLogger("rotor.router")


@dataclass(slots=True)
class Attempt:
    """The request (or its continuation) sent to one worker."""

    worker: str
    stream: EngineStream
    span: Span
    prefill: int  # prompt tokens the worker computes, counted in the load until its first output
    sent: int  # the request's tokens before this attempt


class PoolStream:
    """A request's outputs from its worker, moved to another one when that
    one fails (up to the migration limit). Stopped, the attempt under way is
    aborted on its worker, a prefill under way is cancelled, and blocks a
    prefill worker holds for it are released."""

    __slots__ = (
        "_pool",
        "_request",
        "_sink",
        "_started",
        "_closed",
        "_progress",
        "_tried",
        "_migrations",
        "_moved",
        "_routed",
        "_attempt",
        "_steady",
        "_handover",
        "_held",
        "_task",
        "_context",
        "_inside",
    )

    def __init__(self, pool: Pool, request: EngineRequest) -> None:
        self._pool = pool
        self._request = request
        self._sink: Sink[EngineOutput] | None = None
        self._started = False
        self._closed = False
        self._progress = migration.Progress()
        self._tried: set[str] = set()
        self._migrations = 0
        self._moved: str | None = None  # why the last attempt failed: the next is a migration
        self._routed: Routed | None = None
        self._attempt: Attempt | None = None
        self._steady = False  # nothing left to do per output but count it
        self._handover: handover.Handover | None = None  # until its decode worker has fetched
        self._held: EngineOutput | None = None  # the prefill's first token, until the decode's
        self._task: asyncio.Task[None] | None = None  # a remote prefill under way
        # the reader's context (its request's span): a migration's spans are its children
        self._context: contextvars.Context | None = None
        self._inside = False  # running in that context now

    # -- Source[EngineOutput] -----------------------------------------------------------

    def subscribe(self, sink: Sink[EngineOutput]) -> None:
        self._sink = sink
        if not self._started:
            self._started = True
            self._context = contextvars.copy_context()
            self._begin()

    def resume(self) -> None:
        attempt = self._attempt
        if attempt is not None:
            attempt.stream.resume()

    def stop(self) -> None:
        self._sink = None
        self._close()

    # -- Sink[EngineOutput]: the attempt's stream ----------------------------------------

    def put(self, item: EngineOutput) -> bool:
        if not self._steady:
            self._first_output()
        self._progress.add(item)
        sink = self._sink
        return sink.put(item) if sink is not None else False

    def end(self, error: Exception | None) -> None:
        attempt, self._attempt = self._attempt, None
        if attempt is None:  # (stopped meanwhile)
            return
        self._attempt_over(attempt, error)
        if error is None:
            held, self._held = self._held, None
            sink = self._sink
            if held is not None and sink is not None:  # (a decode stream that said nothing)
                sink.put(held)
            self._finish(None)
        elif isinstance(error, EngineError):
            self._in_context(self._failed, attempt.worker, error)
        else:  # a bug below: no worker to blame
            self._finish(error)

    # -- the steps -----------------------------------------------------------------------

    def _begin(self) -> None:
        """Route the request; its prefill placed, and run first when remote."""
        pool, request = self._pool, self._request
        rid = request.request_id
        route = tracing.start("rotor.route", {"rotor.engine_request_id": rid})
        try:
            pick = pool.choose(request, self._tried, route)
            self._routed = pool.routes(rid, pick.headers)
            placement = handover.place(pool, request, pick, route)
        except EngineError as e:
            self._finish(e)
            return
        route.end()
        if placement is not None and placement.where == "remote":
            self._task = asyncio.get_running_loop().create_task(
                self._prefill_first(pick, placement)
            )
        else:
            self._open(request, pick)

    async def _prefill_first(self, pick: Pick, placement: Placement) -> None:
        """The prefill on a prefill worker, then the decode attempt (or, when
        it did not work out, the whole request on the decode worker)."""
        pool, request = self._pool, self._request
        try:
            handed = await handover.prefill_on(pool, request, pick, placement)
        except EngineError as e:
            self._task = None
            self._finish(e)
            return
        self._task = None
        if handed is not None:
            self._handover = handed
            self._progress.add(handed.first)
            if handover.ends_the_answer(request, handed.first):
                sink = self._sink
                if sink is not None:
                    sink.put(handed.first)  # its reader ends it, and nobody fetches
                if self._sink is None:
                    return
            else:
                self._held = handed.first
            request = handover.decode_request(
                request,
                self._progress,
                handed,
                pool.disagg.enforce,
                pool.card.capabilities.images_at_decode,
            )
        self._open(request, pick)

    def _open(self, request: EngineRequest, pick: Pick) -> None:
        """An attempt: `request` sent to `pick`'s worker, its stream subscribed."""
        pool = self._pool
        worker = pick.worker_id
        prefill = pool.load.sent(worker, request, pick)
        decode = self._handover is not None
        span = attempt_span(worker, request, self._migrations, self._moved, decode)
        stream = pool.link.generate(worker, request, pool.request_timeout, span.headers())
        self._attempt = Attempt(worker, stream, span, prefill, self._progress.tokens)
        self._steady = False
        stream.subscribe(self)

    def _first_output(self) -> None:
        """The attempt's first output: its prompt is computed, a handover is
        over (timed), and a held first token goes before it."""
        attempt = self._attempt
        assert attempt is not None
        pool = self._pool
        if attempt.prefill:
            pool.load.prefilled(attempt.worker, attempt.prefill)
            attempt.prefill = 0
        handed = self._handover
        if handed is not None:  # the blocks moved: the handover is over
            pool.stats.handover.observe(time.monotonic() - handed.at)
            self._handover = None
        held, self._held = self._held, None
        sink = self._sink
        if held is not None and sink is not None:
            sink.put(held)
        self._steady = True

    def _failed(self, worker: str, error: EngineError) -> None:
        """An attempt failed: migrate, or end with the error."""
        pool, request = self._pool, self._request
        self._moved = error.cause or "unavailable"
        handed, self._handover = self._handover, None
        if handed is not None:  # its decode worker failed: nobody will fetch
            pool.link.release_kv(handed.worker, handed.transfer_id)
        refused = migration.refusal(
            error, self._migrations, pool.migration_limit, request, pool.card
        )
        if refused is not None:
            self._finish(refused)
            return
        self._tried.add(worker)
        self._migrations += 1
        pool.stats.migrations[self._moved] += 1
        log.warning(
            "request %s: %s; migrating (%d/%d) with %d tokens so far",
            request.request_id,
            error.message,
            self._migrations,
            pool.migration_limit,
            self._progress.tokens,
        )
        self._migrate()

    def _migrate(self) -> None:
        """The request, with its output so far, on another worker."""
        pool, request = self._pool, self._request
        rid = request.request_id
        again = migration.resumed(request, self._progress, f"{rid}-m{self._migrations}")
        route = tracing.start("rotor.route", {"rotor.engine_request_id": rid})
        try:
            pick = pool.choose(again, self._tried, route)
        except EngineError as e:
            self._finish(e)
            return
        route.end()
        if self._routed is not None and self._moved is not None:
            self._routed.migrations.append((self._moved, pick.worker_id))
        self._open(again, pick)

    # -- the end ----------------------------------------------------------------------------

    def _attempt_over(self, attempt: Attempt, error: Exception | None) -> None:
        """An attempt's span ends, and its worker's load lets go of it."""
        span = attempt.span
        if isinstance(error, EngineError):
            span.fail(error.message, error.cause)
        elif error is not None:
            span.fail(f"{type(error).__name__}: {error}")
        span.set({"gen_ai.usage.output_tokens": self._progress.tokens - attempt.sent})
        span.end()
        self._pool.load.done(attempt.worker, attempt.prefill)

    def _finish(self, error: Exception | None) -> None:
        sink, self._sink = self._sink, None
        self._close()
        if sink is not None:
            try:
                sink.end(error)
            except Exception as e:
                broken(sink, e, True)

    def _close(self) -> None:
        """Once: whatever still runs stops, and the pool lets go of the request."""
        if self._closed:
            return
        self._closed = True
        pool = self._pool
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        attempt, self._attempt = self._attempt, None
        if attempt is not None:  # aborted on its worker
            attempt.stream.stop()
            self._attempt_over(attempt, None)
        handed, self._handover = self._handover, None
        if handed is not None:  # ended before its decode worker fetched: free them now
            pool.link.release_kv(handed.worker, handed.transfer_id)
        if self._started:
            pool.forget(self._request.request_id)

    def _in_context(self, step: Callable[..., Any], *args: Any) -> None:
        """A step in the reader's context (an attempt's end comes in the
        transport's, where no request's span is current)."""
        context = self._context
        if context is None or self._inside:
            step(*args)
            return
        self._inside = True
        try:
            context.run(step, *args)
        finally:
            self._inside = False
