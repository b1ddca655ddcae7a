"""Server-sent events: the two framings rotor's APIs use, the templates
shapers fill per token, and the watch on the connection (`race_disconnect`)
that the streamed response (api/sse_response.py) and the non-streaming
routes race their work against: when the client goes away the work is
cancelled at once (which closes the pipeline and aborts the engine's work).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Protocol, TypeVar, cast

import orjson
from starlette.types import Receive

DONE = b"data: [DONE]\n\n"

# Where the app keeps the server's own `send` in the scope (api/app.py): a
# stream's middle writes go there directly. The middleware between (error
# handlers, body limits, the access log) look only at a response's start and
# its last write, and each layer cost every token a coroutine call.
SERVER_SEND = "rotor.server_send"

T = TypeVar("T")


def sse_event(data: Any) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def named_event(event: dict[str, Any]) -> bytes:
    """One named SSE event, as Anthropic and the Responses API send them."""
    kind: str = event["type"]  # every named event has its type
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


# Where a template's variable parts go: strings no event can otherwise hold
# (NUL cannot be in a header, a model name or an id).
HOLE = "\x00rotor-hole\x00"
NUMBER_HOLE = "\x00rotor-number\x00"


def template(framed: bytes, *holes: str) -> tuple[bytes, ...] | None:
    """The bytes of a framed event made with each of `holes` (default: HOLE)
    as a field's value, cut around them, in order: for a string hole,
    `orjson.dumps(value)` goes between two parts, for NUMBER_HOLE the
    number's digits, and the result is the very bytes the event with those
    values frames to (orjson writes a value the same wherever it stands).
    None when a hole is not there exactly once, in that order."""
    parts: list[bytes] = []
    rest = framed
    for hole in holes or (HOLE,):
        mark = orjson.dumps(hole)
        if framed.count(mark) != 1:
            return None
        before, found, rest = rest.partition(mark)
        if not found:  # out of order
            return None
        parts.append(before)
    parts.append(rest)
    return tuple(parts)


# A quiet stream's keepalive: after this many seconds with no write, these bytes.
Keepalive = tuple[float, bytes]


class Framing(Protocol):
    """How an API writes its events as SSE."""

    keepalive: Keepalive | None

    def frame(self, events: list[dict[str, Any]]) -> bytes:
        """`events`, each framed, joined (b"" for none)."""
        ...

    def tail(self, events: list[dict[str, Any]]) -> bytes:
        """`events` (the last an API sends: its finish, or its failure) as
        the last bytes of a stream (OpenAI's then end with `data: [DONE]`)."""
        ...


class OpenAIFraming:
    """OpenAI's framing: `data: <chunk>` events, then `data: [DONE]`."""

    keepalive: Keepalive | None = None

    def frame(self, events: list[dict[str, Any]]) -> bytes:
        if len(events) == 1:
            return b"data: " + orjson.dumps(events[0]) + b"\n\n"
        return b"".join([sse_event(e) for e in events])

    def tail(self, events: list[dict[str, Any]]) -> bytes:
        return self.frame(events) + DONE


OPENAI = OpenAIFraming()


class NamedFraming:
    """Named events (`event: <type>` + `data: <event>`), as Anthropic and the
    Responses API send them; `keepalive` (optional) is an event a quiet
    stream sends (Anthropic's pings)."""

    def __init__(self, keepalive: Keepalive | None = None) -> None:
        self.keepalive = keepalive

    def frame(self, events: list[dict[str, Any]]) -> bytes:
        return b"".join([named_event(e) for e in events])

    def tail(self, events: list[dict[str, Any]]) -> bytes:
        return self.frame(events)


NAMED = NamedFraming()


async def wait_disconnect(receive: Receive) -> None:
    """Returns when the client has gone away (after the body has been read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def race_disconnect(
    work: Awaitable[T], receive: Receive, stop: asyncio.Event | None = None
) -> asyncio.Future[T] | None:
    """Run `work` while watching the connection (and `stop`, when given). The
    finished work (its result or exception inside), or None when the client
    went away or `stop` was set first — the work is then cancelled, and done
    by the time this returns."""
    task = asyncio.ensure_future(work)
    waits: set[asyncio.Future[Any]] = {task, asyncio.ensure_future(wait_disconnect(receive))}
    if stop is not None:
        waits.add(asyncio.ensure_future(stop.wait()))
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in waits:
            if not t.done():
                t.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    return task if task in done else None


# -- a write stepped by hand ------------------------------------------------------
#
# The streamed response writes what its source puts at once, in the source's
# turn, by stepping the server's `send` coroutine once by hand: mostly it is
# done there and then. When it suspends (the socket is full), the coroutine
# and the future it suspended on are kept, and the response's own task
# finishes the step (`finish_step`), exactly as `await` would have done.


@types.coroutine
def finish_step(coro: Coroutine[Any, Any, T], pending: Any) -> Generator[Any, Any, T]:
    """Finish a coroutine that already suspended once (on `pending`): hand that
    future to the running task and step the coroutine with what it sends
    back, as `await` would have; a cancellation that arrives meanwhile is
    thrown into the coroutine."""
    while True:
        try:
            sent = yield pending
        except BaseException as exc:
            try:
                pending = coro.throw(exc)
            except StopIteration as stop:
                return cast(T, stop.value)
        else:
            try:
                pending = coro.send(sent)
            except StopIteration as stop:
                return cast(T, stop.value)
