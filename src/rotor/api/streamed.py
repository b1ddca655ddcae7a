"""A streamed response's bytes, pulled or pushed.

`Shaping` is one response's metrics (`Observation`), its API's shaper and
its SSE framing: the bytes of its opening, of each event, of a failure and
of its end, and its status. Two ways drive it, with the same bytes:

- `body` pulls the events and yields each one's bytes (the SSE response
  writes what is ready at once, `api/coalesce.py`): any response;
- `PushedBody` has the events pushed to it (a response of one choice over
  an in-process engine that pushes, pipeline/generate.py) and writes each
  event's bytes through the SSE response's writer the moment the engine
  makes it, in the engine's own turn: no task is woken and no generator
  crossed per token.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

from rotor.api.errors import client_error
from rotor.api.observe import Observation
from rotor.api.sse import Framing
from rotor.api.sse_response import Writer
from rotor.frontend import StartedResponse
from rotor.pipeline.events import ChoiceEvent, ResponseFailed

if TYPE_CHECKING:
    from rotor.api.respond import EventShaper

log = logging.getLogger("rotor.api")


class Shaping:
    """One streamed response's bytes and metrics. The observation starts
    with the opening (in flight from the first write); `end` once."""

    __slots__ = ("_watch", "_obs", "_shaper", "_framing", "_frames", "_event", "_frame", "status")

    def __init__(
        self, watch: Callable[[], Observation], shaper: EventShaper, framing: Framing
    ) -> None:
        self._watch = watch
        self._obs: Observation | None = None
        self._shaper = shaper
        self._framing = framing
        self._frames, self._event, self._frame = shaper.frames, shaper.event, framing.frame
        self.status = "200"  # "500" once it failed

    def opening(self) -> bytes:
        self._obs = self._watch()
        return self._frame(self._shaper.start())

    def event(self, event: ChoiceEvent) -> bytes:
        if event.pieces:
            self._obs.pieces()  # type: ignore[union-attr]
        data = self._frames(event)
        return data if data is not None else self._frame(self._event(event))

    def failed(self, error: ResponseFailed) -> bytes:
        """A failure after the start: the API's own failure events, last."""
        self.broken(error)
        failure = self._shaper.fail(client_error(error.failure))
        return self._framing.tail(failure)

    def closing(self) -> bytes:
        return self._framing.tail(self._shaper.finish())

    def broken(self, error: Exception) -> None:
        """The response failed (its failure events, or a bug)."""
        self.status = "500"
        if self._obs is not None:
            self._obs.failed(str(error))

    def end(self, complete: bool) -> None:
        """Its last bytes went (`complete`), or the client left first."""
        if self._obs is not None:
            self._obs.end(self.status if complete else "cancelled")


async def body(shaping: Shaping, resp: StartedResponse) -> AsyncGenerator[bytes, None]:
    """The response's bytes, one chunk per internal event that shows, its
    events pulled: metrics, shaping and framing in one loop, so a token
    crosses one layer on its way to the socket."""
    events = resp.events
    event_bytes = shaping.event
    complete = False
    try:
        data = shaping.opening()
        if data:
            yield data
        try:
            async for event in events:
                data = event_bytes(event)
                if data:
                    yield data
        except ResponseFailed as e:
            yield shaping.failed(e)
            complete = True
            return
        data = shaping.closing()
        complete = True
        if data:
            yield data
    except Exception as e:  # a bug
        shaping.broken(e)
        complete = True
        raise
    finally:
        await events.aclose()
        shaping.end(complete)


class PushedBody:
    """The response's bytes, its events pushed: `start` (from the SSE
    response, with its writer) hands the events to this sink; each is
    written at once, the last closes the stream. A writer that cannot take
    more (a slow client) holds the engine until the SSE response `resume`s."""

    __slots__ = ("_shaping", "_events", "_writer")

    def __init__(self, shaping: Shaping, resp: StartedResponse) -> None:
        self._shaping = shaping
        self._events: Any = resp.events
        self._writer: Writer | None = None

    # -- the SSE response's side (api/sse_response.py's PushSource) -------------------------

    def start(self, writer: Writer) -> bool:
        """Write the opening and push the events, or False (nothing written)
        when they cannot be pushed: then pull `body`."""
        events = self._events
        if not getattr(events, "pushable", False):  # (not isinstance: a Protocol's costs ~9 µs)
            return False
        self._writer = writer
        try:
            data = self._shaping.opening()
            if data:
                writer.write(data)
            if not events.deliver(self):
                raise RuntimeError("a pushable stream would not push")
        except Exception as e:  # a bug: ended as a pulled body that raised
            self._broke(e)
        return True

    def resume(self) -> None:
        self._events.resume()

    def stop(self) -> None:
        """The client left, or the server stops: the engine's work ends now."""
        self._events.stop()

    def finish(self, complete: bool) -> None:
        self._shaping.end(complete)
        self._writer = None

    # -- the events' side (pipeline/generate.py's EventSink) ----------------------------------

    def event(self, event: ChoiceEvent) -> bool:
        try:
            data = self._shaping.event(event)
        except Exception as e:
            self._broke(e)
            return False
        return self._writer.write(data) if data else True  # type: ignore[union-attr]

    def ended(self) -> None:
        try:
            data = self._shaping.closing()
        except Exception as e:
            self._broke(e)
            return
        self._writer.close(data)  # type: ignore[union-attr]

    def failed(self, error: ResponseFailed) -> None:
        try:
            data = self._shaping.failed(error)
        except Exception as e:
            self._broke(e)
            return
        self._writer.close(data)  # type: ignore[union-attr]

    def _broke(self, error: Exception) -> None:
        """A bug while shaping: logged, the engine stopped, the API's own
        failure ending written (as a pulled stream that raised)."""
        log.exception("a pushed stream failed: %s", error)
        self._shaping.broken(error)
        self._events.stop()
        self._writer.fail()  # type: ignore[union-attr]
