"""A streamed response's bytes: its events shaped into the API's SSE bytes.

`Shaping` is one response's metrics (`Observation`), its API's shaper and
its SSE framing: the bytes of its opening, of each event, of a failure and
of its end, and its status. `ShapedStream` drives it: a sink of the
response's events (the choice pipeline puts each, in the engine's turn) and
a source of bytes for the SSE response (api/sse_response.py), which writes
each the moment it is put: no task is woken and no generator crossed per
token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from rotor.api.errors import client_error
from rotor.api.observe import Observation
from rotor.api.sse import Framing
from rotor.pipeline.events import ChoiceEvent, ResponseFailed
from rotor.protocol.flow import Sink, Source

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
        obs = self._obs
        if event.pieces and obs is not None:
            obs.pieces()
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


class ShapedStream:
    """A response's bytes as its events come: a sink of the events and a
    source of bytes. Subscribed (by the SSE response), it puts the opening
    and subscribes itself to the events; each event's bytes are put at once,
    its failure's or its closing's last, then the end. A bug while shaping
    is logged, stops the events and ends the bytes with it (the SSE response
    writes the API's failure ending). `finish` says how the response ended."""

    __slots__ = ("_shaping", "_events", "_sink")

    def __init__(self, shaping: Shaping, events: Source[ChoiceEvent]) -> None:
        self._shaping = shaping
        self._events = events
        self._sink: Sink[bytes] | None = None

    # -- Source[bytes] -----------------------------------------------------------------

    def subscribe(self, sink: Sink[bytes]) -> None:
        self._sink = sink
        try:
            data = self._shaping.opening()
            if data:
                sink.put(data)
        except Exception as e:
            self._broke(e)
            return
        self._events.subscribe(self)

    def resume(self) -> None:
        self._events.resume()

    def stop(self) -> None:
        """The client left, or the server stops: the engine's work ends now."""
        self._sink = None
        self._events.stop()

    def finish(self, complete: bool) -> None:
        """The response is over: its last bytes went (`complete`), or not."""
        self._shaping.end(complete)

    # -- Sink[ChoiceEvent] -------------------------------------------------------------

    def put(self, item: ChoiceEvent) -> bool:
        sink = self._sink
        if sink is None:
            return False
        try:
            data = self._shaping.event(item)
        except Exception as e:
            self._broke(e)
            return False
        return sink.put(data) if data else True

    def end(self, error: Exception | None) -> None:
        sink, self._sink = self._sink, None
        if sink is None:
            return
        try:
            if error is None:
                data = self._shaping.closing()
            elif isinstance(error, ResponseFailed):
                data = self._shaping.failed(error)
            else:
                raise error
        except Exception as e:
            self._sink = sink
            self._broke(e)
            return
        sink.put(data)
        sink.end(None)

    def _broke(self, error: Exception) -> None:
        """A bug while shaping: logged, the events stopped, the bytes ended
        with it (the SSE response writes the API's own failure ending)."""
        log.error("a streamed response failed: %s", error, exc_info=error)
        self._shaping.broken(error)
        sink, self._sink = self._sink, None
        self._events.stop()
        if sink is not None:
            sink.end(error)
