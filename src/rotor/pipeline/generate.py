"""Drive a response's engine requests through their choice pipelines.

Every choice is its own engine request (n fans out, as vLLM's parallel
sampling does), so each can be ended, aborted or moved to another worker on
its own. A `ChoiceRun` is the sink of its engine stream and a source of
`ChoiceEvent`s (protocol/flow.py): the engine puts each output, the run
makes its event and puts it to its own sink, in the engine's turn of the
event loop. A choice that fails (the engine's error, output that broke its
constraint) ends its sink with `ResponseFailed` in the place of its last
event. Stopping an engine's stream is what aborts its work (the Engine
contract), and it is the only abort the pipeline sends: at once for a choice
the frontend ended itself (stop string, max_tokens), before its last event
is handed on, and when the reader leaves (client disconnect). `Choices`
merges the choices of a response of several.
"""

from __future__ import annotations

import logging

from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.decode import End
from rotor.pipeline.events import ChoiceEvent, Failure, ResponseFailed, Usage
from rotor.pipeline.preprocess import Prepared
from rotor.protocol.engine import (
    EngineClient,
    EngineError,
    EngineOutput,
    EngineRequest,
    EngineStream,
    PromptLogprob,
)
from rotor.protocol.flow import Sink, SinkBroke, Source

log = logging.getLogger("rotor.pipeline")


class ChoiceRun:
    """One choice's events until it finishes: its engine stream through its
    pipeline, one event per engine output. `take_cached`: this choice reports
    the prompt's cached tokens (one choice per prompt does). A request that
    asks for the prompt's logprobs gets them on its first output, and the
    choice's first event carries them."""

    __slots__ = (
        "_engine",
        "_request",
        "_stream",
        "_choice",
        "_index",
        "_usage",
        "_take_cached",
        "_take_prompt",
        "_opening",
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
        self._stream: EngineStream | None = None
        self._choice = choice
        self._index = index
        self._usage = usage
        self._take_cached = take_cached
        self._take_prompt = request.output.prompt_logprobs is not None
        # what the first outputs still owe (checked once an output, as one flag)
        self._opening = take_cached or self._take_prompt
        self._over = False  # its last event was made
        self._sink: Sink[ChoiceEvent] | None = None

    # -- Source[ChoiceEvent] -------------------------------------------------------------

    def subscribe(self, sink: Sink[ChoiceEvent]) -> None:
        """The first call sends the engine request."""
        self._sink = sink
        if self._stream is None:
            stream = self._stream = self._engine.generate(self._request)
            stream.subscribe(self)

    def resume(self) -> None:
        if self._stream is not None and not self._over:
            self._stream.resume()

    def stop(self) -> None:
        """The reader is gone: the engine's work stops now, nothing more comes."""
        self._sink = None
        if self._stream is not None:
            self._stream.stop()

    # -- Sink[EngineOutput] ----------------------------------------------------------------

    def put(self, item: EngineOutput) -> bool:
        sink = self._sink
        if sink is None:
            return False
        try:
            event = self._event(item)
        except Exception as e:
            self.stop()
            sink.end(self._failed(e))
            return False
        if self._over:  # its last event: the stream's own end is a formality
            if item.finish is None:  # the frontend ended it: stop the engine now
                self._stopped()
            sink.put(event)
            if self._sink is sink:  # (not stopped by the sink meanwhile)
                self._sink = None
                sink.end(None)
            return True
        return sink.put(event)

    def end(self, error: Exception | None) -> None:
        """The engine's stream ended: a last event for a choice it left open."""
        sink, self._sink = self._sink, None
        if sink is None or self._over:
            return
        self._over = True
        if isinstance(error, SinkBroke):  # the reader above broke: it ends with that
            sink.end(ResponseFailed(Failure("internal", str(error))))
            return
        try:
            event = self._closing(self._failure(error))
        except Exception as e:
            sink.end(self._failed(e))
            return
        sink.put(event)
        sink.end(None)

    # -- its own -------------------------------------------------------------------------

    def _stopped(self) -> None:
        stream = self._stream
        if stream is not None:
            stream.stop()

    def _failure(self, error: Exception | None) -> Failure | None:
        """What the engine's end says of the choice: nothing, its error, or a
        bug (logged) as the internal failure of a broken engine."""
        if error is None:
            return None
        if isinstance(error, EngineError):
            return Failure.from_engine(error)
        log.error(
            "engine request %s failed",
            self._request.request_id,
            exc_info=(type(error), error, error.__traceback__),
        )
        return Failure("internal", f"{type(error).__name__}: {error}")

    def _failed(self, error: Exception) -> ResponseFailed:
        """What a choice ends with when its pipeline raised: its own failure,
        or a bug (logged) as an internal error."""
        if isinstance(error, ResponseFailed):
            return error
        log.error(
            "the pipeline of engine request %s failed",
            self._request.request_id,
            exc_info=(type(error), error, error.__traceback__),
        )
        return ResponseFailed(Failure("internal", f"{type(error).__name__}: {error}"))

    def _event(self, out: EngineOutput) -> ChoiceEvent:
        """One engine output through the choice's pipeline; ResponseFailed
        when the choice failed."""
        prompt = self._open(out) if self._opening else None
        choice = self._choice
        pieces = choice.feed(out)
        finished = choice.finished
        if finished is not None:
            self._over = True
            if finished.failure is not None:
                raise ResponseFailed(finished.failure)
        event = choice.event(self._index, pieces)
        if prompt is not None:
            event.prompt_logprobs = prompt
        return event

    def _open(self, out: EngineOutput) -> list[PromptLogprob] | None:
        """What the first outputs owe: the prompt's cached tokens (counted
        into usage), and the prompt's logprobs when asked (returned: the
        first output carries them; one without them, unless it is an
        error, is a broken engine's)."""
        prompt = None
        if self._take_cached and out.cached_tokens is not None:
            self._take_cached = False
            usage = self._usage
            usage.cached_tokens = (usage.cached_tokens or 0) + out.cached_tokens
        if self._take_prompt:
            self._take_prompt = False
            prompt = out.prompt_logprobs
            if prompt is None and out.finish != "error":
                raise ResponseFailed(
                    Failure(
                        "internal",
                        f"engine request {self._request.request_id}: the first output "
                        "has no prompt logprobs",
                    )
                )
        self._opening = self._take_cached or self._take_prompt
        return prompt

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


class Choices:
    """The events of a response of several choices, as they come: a source
    over their runs (each puts through a `_Member`), ended once all have
    ended, or at the first that fails (the others stop). A sink that holds
    holds every choice (each is told as it puts), and `resume` resumes them
    all."""

    __slots__ = ("_runs", "_sink", "_left", "_started", "_over")

    def __init__(self, runs: list[ChoiceRun]) -> None:
        self._runs = runs
        self._sink: Sink[ChoiceEvent] | None = None
        self._left = len(runs)
        self._started = False
        self._over = False  # ended, or stopped

    def subscribe(self, sink: Sink[ChoiceEvent]) -> None:
        self._sink = sink
        if not self._started:
            self._started = True
            for run in self._runs:
                run.subscribe(_Member(self))
                if self._over:  # one failed at once: the rest never start
                    break

    def resume(self) -> None:
        for run in self._runs:
            run.resume()

    def stop(self) -> None:
        self._sink = None
        self._over = True
        for run in self._runs:
            run.stop()

    def put(self, event: ChoiceEvent) -> bool:
        sink = self._sink
        return sink.put(event) if sink is not None else False

    def ended(self, error: Exception | None) -> None:
        """One choice ended (its last event put already)."""
        sink = self._sink
        if sink is None:
            return
        if error is not None:  # the response fails with it: the other choices stop
            self.stop()
            sink.end(error)
            return
        self._left -= 1
        if not self._left:
            self._sink = None
            self._over = True
            sink.end(None)


class _Member:
    """The sink one choice of several puts into."""

    __slots__ = ("_all",)

    def __init__(self, all_: Choices) -> None:
        self._all = all_

    def put(self, item: ChoiceEvent) -> bool:
        return self._all.put(item)

    def end(self, error: Exception | None) -> None:
        self._all.ended(error)


def run_all(engine: EngineClient, prepared: list[Prepared], usage: Usage) -> Source[ChoiceEvent]:
    """Every choice of a response (n choices of each prompt) as one source of
    events, in the order they happen. One choice is its own source: no layer
    between it and the reader."""
    runs = [
        ChoiceRun(engine, request, choice, p.first_index + i, usage, i == 0)
        for p in prepared
        for i, (request, choice) in enumerate(zip(p.requests, p.choices, strict=True))
    ]
    return runs[0] if len(runs) == 1 else Choices(runs)
