"""Drive a response's engine requests through their choice pipelines.

Every choice is its own engine request (n fans out, as vLLM's parallel
sampling does), so each can be ended, aborted or moved to another worker on
its own. A `ChoiceRun` makes one `ChoiceEvent` per engine output; a choice
that fails (the engine's error, output that broke its constraint) raises
`ResponseFailed` in the place of its last event. Closing an
engine's stream early is what aborts its work (the Engine contract), and it
is the only abort the pipeline sends: at once for a choice the frontend
ended itself (stop string, max_tokens), before its last event is handed on,
and when the reader leaves (client disconnect). `run_all` merges the choices
of a response.

A choice is read (pulled), or, when its engine stream can push
(rotor.protocol.engine.Pushed: the in-process mocker), its reader may have
the rest pushed (`ChoiceRun.deliver`): the engine then hands each step's
outputs over in its own turn, and the choice's pipeline and the reader's
own work (shaping, the socket write) run right there, with no task woken
and no generator crossed per token.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol

from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.decode import End
from rotor.pipeline.events import ChoiceEvent, Failure, ResponseFailed, Usage
from rotor.pipeline.preprocess import Prepared
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest, is_pushed

log = logging.getLogger("rotor.pipeline")


class EngineClient(Protocol):
    """What the pipeline needs of an engine: a request's stream of outputs,
    whose early close aborts the request."""

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]: ...


class EventSink(Protocol):
    """Where a pushed choice's events go (`ChoiceRun.deliver`), in the
    engine's turn: each event as it is made, then `ended` or `failed`, once."""

    def event(self, event: ChoiceEvent) -> bool:
        """False: the reader cannot take more now; it calls `ChoiceRun.resume`
        when it can."""
        ...

    def ended(self) -> None: ...

    def failed(self, error: ResponseFailed) -> None: ...


class Pushable(Protocol):
    """A response's events that can be pushed (frontend's `_Primed` over a
    `ChoiceRun`): `pushable` says whether they can now, `deliver` starts it."""

    @property
    def pushable(self) -> bool: ...

    def deliver(self, sink: EventSink) -> bool: ...

    def resume(self) -> None: ...

    def stop(self) -> None: ...


class ChoiceRun:
    """One choice's events until it finishes: its engine stream through its
    pipeline. Pulled (`__anext__`, an async iterator of ChoiceEvents), or,
    over an engine stream that can push (`Pushed`), pushed (`deliver`): the
    same `_event` for each output either way. `take_cached`: this choice
    reports the prompt's cached tokens (one choice per prompt does)."""

    __slots__ = (
        "_engine",
        "_request",
        "_stream",
        "_choice",
        "_index",
        "_usage",
        "_take_cached",
        "_over",
        "_sink",
    )

    def __init__(
        self,
        engine: EngineClient,
        request: EngineRequest,
        choice: ChoicePipeline,
        index: int,
        usage: Usage,
        take_cached: bool,
    ) -> None:
        self._engine = engine
        self._request = request
        self._stream: AsyncIterator[EngineOutput] | None = None
        self._choice = choice
        self._index = index
        self._usage = usage
        self._take_cached = take_cached
        self._over = False  # its last event was made
        self._sink: EventSink | None = None

    # -- pulled ----------------------------------------------------------------------

    def __aiter__(self) -> ChoiceRun:
        return self

    async def __anext__(self) -> ChoiceEvent:
        if self._over:
            raise StopAsyncIteration
        stream = self._stream
        if stream is None:
            stream = self._stream = self._engine.generate(self._request)
        try:
            out = await stream.__anext__()
        except StopAsyncIteration:  # the stream ended without a finish
            return await self._end(None)
        except EngineError as e:
            return await self._end(Failure.from_engine(e))
        except asyncio.CancelledError:
            await self.aclose()
            raise
        except Exception as e:  # a broken engine must not break the response
            log.exception("engine request %s failed", self._request.request_id)
            return await self._end(Failure("internal", f"{type(e).__name__}: {e}"))
        try:
            event = self._event(out)
            if self._over and out.finish is None:  # the frontend ended it: stop the engine now
                await self.aclose()
        except BaseException:
            await self.aclose()
            raise
        return event

    async def aclose(self) -> None:
        """Closing the engine's stream: the one abort the pipeline sends."""
        stream = self._stream
        if stream is not None:
            await stream.aclose()  # type: ignore[attr-defined]

    async def _end(self, failure: Failure | None) -> ChoiceEvent:
        self._over = True
        await self.aclose()
        return self._closing(failure)

    # -- pushed ----------------------------------------------------------------------

    @property
    def pushable(self) -> bool:
        """Its engine stream can push, and more is to come."""
        stream = self._stream
        return not self._over and is_pushed(stream) and stream.pushable

    def deliver(self, sink: EventSink) -> bool:
        """Push the rest of the choice's events to `sink` (what the engine has
        made and not yet read at once, in this call); False, and nothing
        changes, when its engine stream cannot push (then pull it)."""
        stream = self._stream
        if self._over or not is_pushed(stream) or not stream.pushable:
            return False
        self._sink = sink
        stream.deliver(self)
        return True

    def resume(self) -> None:
        """The sink can take events again."""
        stream = self._stream
        if is_pushed(stream) and not self._over:
            stream.resume()

    def stop(self) -> None:
        """The reader is gone: the engine's work stops now, nothing more comes."""
        self._sink = None
        stream = self._stream
        if is_pushed(stream):
            stream.stop()

    def outputs(self, outputs: list[EngineOutput]) -> bool:
        """The engine's push (rotor.protocol.engine.Delivery)."""
        sink = self._sink
        if sink is None:
            return False
        keep = True
        for out in outputs:
            try:
                event = self._event(out)
            except Exception as e:
                self.stop()
                sink.failed(self._failed(e))
                return False
            if self._over and out.finish is None:  # the frontend ended it: stop the engine now
                self.stop()
            keep = sink.event(event)
            if self._over:  # its last event: the stream's own end is a formality
                self._sink = None
                sink.ended()
                return True
            if self._sink is None:  # the sink stopped it (a bug while shaping): no more events
                return False
        return keep

    def ended(self, error: EngineError | None) -> None:
        """The engine's stream ended (rotor.protocol.engine.Delivery)."""
        sink, self._sink = self._sink, None
        if sink is None or self._over:
            return
        self._over = True
        try:
            event = self._closing(Failure.from_engine(error) if error is not None else None)
        except Exception as e:
            sink.failed(self._failed(e))
            return
        sink.event(event)
        sink.ended()

    def _failed(self, error: Exception) -> ResponseFailed:
        """What a pushed choice ends with when its pipeline raised: its own
        failure, or a bug (logged) as the internal error a pulled one gives."""
        if isinstance(error, ResponseFailed):
            return error
        log.exception("the pipeline of engine request %s failed", self._request.request_id)
        return ResponseFailed(Failure("internal", f"{type(error).__name__}: {error}"))

    # -- both -----------------------------------------------------------------------------

    def _event(self, out: EngineOutput) -> ChoiceEvent:
        """One engine output through the choice's pipeline; ResponseFailed
        when the choice failed."""
        if self._take_cached and out.cached_tokens is not None:
            self._take_cached = False
            usage = self._usage
            usage.cached_tokens = (usage.cached_tokens or 0) + out.cached_tokens
        choice = self._choice
        pieces = choice.push(out)
        finished = choice.finished
        if finished is not None:
            self._over = True
            if finished.failure is not None:
                raise ResponseFailed(finished.failure)
        return choice.event(self._index, pieces)

    def _closing(self, failure: Failure | None) -> ChoiceEvent:
        """The last event of a choice whose stream ended without a finish (or broke)."""
        choice = self._choice
        if failure is not None:
            pieces = choice.close(End.ERROR, failure)
        else:
            pieces = choice.close(End.TRANSPORT_EOF)
        finished = choice.finished
        if finished is not None and finished.failure is not None:
            raise ResponseFailed(finished.failure)
        return choice.event(self._index, pieces)


def _streams(engine: EngineClient, prepared: list[Prepared], usage: Usage) -> list[ChoiceRun]:
    streams = []
    for p in prepared:
        for i, (request, choice) in enumerate(zip(p.requests, p.choices, strict=True)):
            streams.append(ChoiceRun(engine, request, choice, p.first_index + i, usage, i == 0))
    return streams


def run_all(
    engine: EngineClient, prepared: list[Prepared], usage: Usage
) -> ChoiceRun | AsyncGenerator[ChoiceEvent, None]:
    """Every choice of a response (n choices of each prompt) merged into one
    stream of events, in the order they happen. One choice is its own stream:
    no layer between it and the reader (each costs every token a step)."""
    streams = _streams(engine, prepared, usage)
    if len(streams) == 1:
        return streams[0]
    return _merged(streams)


async def _merged(streams: list[ChoiceRun]) -> AsyncGenerator[ChoiceEvent, None]:
    queue: asyncio.Queue[ChoiceEvent | ResponseFailed | None] = asyncio.Queue()
    # Events taken from the choices but not yet read: bounded, so a slow
    # reader stops the choices (and their engine requests) instead of piling up.
    window = asyncio.Semaphore(2 * len(streams))

    async def pump(stream: ChoiceRun) -> None:
        try:
            async for event in stream:
                queue.put_nowait(event)
                await window.acquire()
        except ResponseFailed as failed:  # raised in its place, once the reader gets there
            queue.put_nowait(failed)
        finally:
            queue.put_nowait(None)
            await stream.aclose()

    tasks = [asyncio.create_task(pump(s)) for s in streams]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
                continue
            if type(item) is ResponseFailed:
                raise item
            window.release()
            yield item
        for t in tasks:
            t.result()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
