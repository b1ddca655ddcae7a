"""Drive a response's engine requests through their choice pipelines.

Every choice is its own engine request (n fans out, as vLLM's parallel
sampling does), so each can be ended, aborted or moved to another worker on
its own. `run_choice` yields one `ChoiceEvent` per engine output; a choice
that fails (the engine's error, output that broke its constraint) raises
`ResponseFailed` in the place of its last event. Closing an
engine's stream early is what aborts its work (the Engine contract), and it
is the only abort the pipeline sends: at once for a choice the frontend
ended itself (stop string, max_tokens), before its last event is handed on,
and when the reader leaves (client disconnect). `run_all` merges the choices
of a response.
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
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest

log = logging.getLogger("rotor.pipeline")


class EngineClient(Protocol):
    """What the pipeline needs of an engine: a request's stream of outputs,
    whose early close aborts the request."""

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]: ...


async def run_choice(
    engine: EngineClient,
    request: EngineRequest,
    choice: ChoicePipeline,
    index: int,
    usage: Usage,
    take_cached: bool,
) -> AsyncGenerator[ChoiceEvent, None]:
    """One choice's events until it finishes. `take_cached`: this choice
    reports the prompt's cached tokens (one choice per prompt does)."""
    stream = engine.generate(request)
    try:
        try:
            async for out in stream:
                if take_cached and out.cached_tokens is not None:
                    take_cached = False
                    usage.cached_tokens = (usage.cached_tokens or 0) + out.cached_tokens
                pieces = choice.push(out)
                finished = choice.finished
                if finished is not None:
                    if out.finish is None:  # the frontend ended it: stop the engine now
                        await stream.aclose()  # type: ignore[attr-defined]
                    if finished.failure is not None:
                        raise ResponseFailed(finished.failure)
                    yield choice.event(index, pieces)
                    return
                yield choice.event(index, pieces)
        except (asyncio.CancelledError, ResponseFailed):
            raise
        except EngineError as e:
            failure = Failure.from_engine(e)
        except Exception as e:  # a broken engine must not break the response
            log.exception("engine request %s failed", request.request_id)
            failure = Failure("internal", f"{type(e).__name__}: {e}")
        else:
            failure = None
        if failure is not None:
            pieces = choice.close(End.ERROR, failure)
        else:  # the stream ended without a finish
            pieces = choice.close(End.TRANSPORT_EOF)
        finished = choice.finished
        if finished is not None and finished.failure is not None:
            raise ResponseFailed(finished.failure)
        yield choice.event(index, pieces)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


def _streams(
    engine: EngineClient, prepared: list[Prepared], usage: Usage
) -> list[AsyncGenerator[ChoiceEvent, None]]:
    streams = []
    for p in prepared:
        for i, (request, choice) in enumerate(zip(p.requests, p.choices, strict=True)):
            streams.append(run_choice(engine, request, choice, p.first_index + i, usage, i == 0))
    return streams


def run_all(
    engine: EngineClient, prepared: list[Prepared], usage: Usage
) -> AsyncGenerator[ChoiceEvent, None]:
    """Every choice of a response (n choices of each prompt) merged into one
    stream of events, in the order they happen. One choice is its own stream:
    no layer between it and the reader (each costs every token a step)."""
    streams = _streams(engine, prepared, usage)
    if len(streams) == 1:
        return streams[0]
    return _merged(streams)


async def _merged(
    streams: list[AsyncGenerator[ChoiceEvent, None]],
) -> AsyncGenerator[ChoiceEvent, None]:
    queue: asyncio.Queue[ChoiceEvent | ResponseFailed | None] = asyncio.Queue()
    # Events taken from the choices but not yet read: bounded, so a slow
    # reader stops the choices (and their engine requests) instead of piling up.
    window = asyncio.Semaphore(2 * len(streams))

    async def pump(stream: AsyncGenerator[ChoiceEvent, None]) -> None:
        try:
            async for event in stream:
                queue.put_nowait(event)
                await window.acquire()
        except ResponseFailed as failed:  # raised in its place, once the reader gets there
            queue.put_nowait(failed)
        finally:
            queue.put_nowait(None)

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
