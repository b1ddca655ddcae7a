"""Drive one engine request through its choice pipelines.

Yields `(choice, pieces)` as they come; a choice is done when
`choice.finished` is set. Ends the engine's work for a choice the frontend
closed itself (stop string, max_tokens), and for the whole request when the
consumer stops iterating (client disconnect) — closing this generator closes
the engine's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from rotor.engines.base import Engine
from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.decode import End
from rotor.pipeline.parse.base import Piece
from rotor.pipeline.preprocess import Prepared

Event = tuple[ChoicePipeline, list[Piece]]


class Usage:
    """Token counts of one response, summed over its engine requests."""

    __slots__ = ("prompt_tokens", "completion_tokens", "cached_tokens")

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens: int | None = None

    def as_openai(self) -> dict:
        usage = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage


async def run_engine(engine: Engine, prepared: Prepared, usage: Usage) -> AsyncIterator[Event]:
    request = prepared.request
    choices = prepared.choices
    usage.prompt_tokens += prepared.prompt_tokens
    open_choices = len(choices)
    cached_seen = False  # every choice reports the same shared-prefix count: take it once
    stream = engine.generate(request)
    try:
        try:
            async for out in stream:
                if out.cached_tokens is not None and not cached_seen:
                    cached_seen = True
                    usage.cached_tokens = (usage.cached_tokens or 0) + out.cached_tokens
                choice = choices[out.index]
                if choice.finished is not None:
                    continue
                pieces = choice.push(out)
                if choice.finished is not None:
                    open_choices -= 1
                    usage.completion_tokens += choice.finished.completion_tokens
                    if out.finish is None and open_choices:
                        engine.abort(request.request_id, out.index)
                yield choice, pieces
                if not open_choices:
                    return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the engine broke: every open choice ends in ERROR
            for choice in choices:
                if choice.finished is None:
                    pieces = choice.close(End.ERROR, f"engine error: {e}")
                    yield choice, pieces
            return
        for choice in choices:  # the stream ended without a finish
            if choice.finished is None:
                pieces = choice.close(End.TRANSPORT_EOF)
                usage.completion_tokens += choice.decoder.tokens
                yield choice, pieces
    finally:
        await stream.aclose()


async def run_all(
    engine: Engine, prepared: list[Prepared], usage: Usage
) -> AsyncIterator[tuple[int, ChoicePipeline, list[Piece]]]:
    """Several engine requests (completions with a list of prompts) merged into
    one stream of (global choice index, choice, pieces)."""
    if len(prepared) == 1:
        p = prepared[0]
        async for choice, pieces in run_engine(engine, p, usage):
            yield p.first_index + choice.index, choice, pieces
        return
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(p: Prepared) -> None:
        try:
            async for choice, pieces in run_engine(engine, p, usage):
                await queue.put((p.first_index + choice.index, choice, pieces))
        finally:
            await queue.put(done)

    tasks = [asyncio.create_task(pump(p)) for p in prepared]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is done:
                remaining -= 1
                continue
            yield item
        for t in tasks:
            t.result()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
