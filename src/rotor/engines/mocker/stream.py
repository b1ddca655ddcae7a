"""A mocker request's outputs on their way to its sink.

The step loop puts each choice's outputs in the request's outbox (a
`Backlog`); the first one since the last delivery lists the request as due,
and at the engine's next delivery point (when it gives the event loop back
after a slice of steps, or after a step at real pace) `MockerStream.deliver`
hands what piled up to the sink, merged per choice, in the engine's own
turn: no task is woken, and no generator stands between the engine and the
sink's code. A sink that says False holds the request's sequences (they are
not stepped) until it resumes; so does an outbox past OUTBOX_WINDOW tokens
between two delivery points.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rotor.engines.mocker.sampler import LogprobMaker
from rotor.engines.mocker.sequence import Sequence
from rotor.protocol.engine import EngineOutput, EngineRequest, PromptLogprob, merge_outputs
from rotor.protocol.flow import Backlog, Sink, broken

if TYPE_CHECKING:
    from rotor.engines.mocker.engine import MockerEngine


# Tokens an outbox may hold between two delivery points before its request's
# sequences stop being computed (a slice of many steps stays bounded).
OUTBOX_WINDOW = 256


@dataclass(frozen=True, slots=True)
class Closed:
    """Outbox marker: this choice ends with no further output (aborted, or `eof`)."""

    index: int


@dataclass(slots=True)
class RequestState:
    """A running request as the engine keeps it: its sequences, their
    logprob makers, its outbox and the stream that reads it (None once
    that stream is closed)."""

    seqs: list[Sequence]
    logprobs: list[LogprobMaker | None]
    stream: MockerStream | None
    outbox: Backlog[EngineOutput | Closed] = field(default_factory=Backlog)
    unread: int = 0  # tokens in the outbox
    aborted: set[int] = field(default_factory=set)
    prefill_only: bool = False  # one token, then the prompt's blocks pinned for a decode worker
    # the prompt's logprobs when asked, until its first output takes them
    prompt_logprobs: list[PromptLogprob] | None = None

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the prefix cache held when the request was first admitted:
        its first admitted choice's count (choices are admitted in index order)."""
        return next((s.cached_tokens for s in self.seqs if s.cached_tokens is not None), 0)


class MockerStream:
    """One request's outputs (`MockerEngine.generate`), a Source of engine
    outputs: admitted when first subscribed, pushed at the engine's delivery
    points until every choice has ended; `stop` aborts whatever still runs."""

    __slots__ = (
        "_engine",
        "_request",
        "_req",
        "_using",
        "_done",
        "_over",
        "_closed",
        "_sink",
        "_opening",
    )

    def __init__(self, engine: MockerEngine, request: EngineRequest) -> None:
        self._engine = engine
        self._request = request
        self._req: RequestState | None = None
        self._using: contextlib.AbstractContextManager[Any] | None = None  # the adapter, in use
        self._done: set[int] = set()  # choices that ended
        self._over = False  # every choice ended
        self._closed = False
        self._sink: Sink[EngineOutput] | None = None
        self._opening: asyncio.Task[None] | None = None

    # -- Source[EngineOutput] --------------------------------------------------------

    def subscribe(self, sink: Sink[EngineOutput]) -> None:
        if self._closed:
            raise RuntimeError("subscribe() after the stream's end")
        self._sink = sink
        if self._req is None and self._opening is None:
            self._opening = asyncio.get_running_loop().create_task(self._open())

    def resume(self) -> None:
        if self._req is not None and not self._closed:
            self._engine.resume_request(self._request.request_id)

    def stop(self) -> None:
        self._sink = None
        self._close()

    # -- the engine's side ---------------------------------------------------------------

    def deliver(self) -> None:
        """A delivery point: the outbox's items to the sink, merged per choice,
        and the end once every choice has ended. A sink that raises (a bug)
        stops the request and is told so (`broken`)."""
        req = self._req
        assert req is not None
        items = req.outbox.take()
        req.unread = 0
        sink = self._sink
        if sink is None:
            return
        keep = True
        aborted = req.aborted
        try:
            for out in self._take(items):
                if aborted and out.index in aborted:  # aborted by the sink itself, just now
                    continue
                keep = sink.put(out)
                if self._sink is not sink:  # it stopped the stream (or moved it on)
                    return
        except Exception as e:
            self.stop()
            broken(sink, e, False)
            return
        rid = self._request.request_id
        if self._over:
            self._sink = None
            self._close()
            try:
                sink.end(None)
            except Exception as e:
                broken(sink, e, True)
        elif keep:  # taken: what the outbox window held may go on
            self._engine.resume_request(rid)
        else:
            self._engine.hold_request(rid)

    # -- its own ----------------------------------------------------------------------------

    async def _open(self) -> None:
        """Admission (the engine's), under the request's adapter, which stays in
        use until the stream is closed; a refusal is the sink's end."""
        engine = self._engine
        using: contextlib.AbstractContextManager[Any] | None = None
        try:
            using = engine.adapter_in_use(self._request.lora)
            using.__enter__()
            self._req = await engine.admit(self._request, self)
        except BaseException as e:
            if using is not None:
                using.__exit__(None, None, None)
            self._opening = None
            if not isinstance(e, Exception) or isinstance(e, asyncio.CancelledError):
                raise  # stopped meanwhile: closed already
            self._closed = True
            sink, self._sink = self._sink, None
            if sink is not None:
                sink.end(e)
            return
        self._opening = None
        self._using = using

    def _take(self, items: list[EngineOutput | Closed]) -> list[EngineOutput]:
        """The outputs among outbox items, merged per choice, without aborted
        choices'; counts the choices that ended."""
        req = self._req
        assert req is not None
        done, aborted = self._done, req.aborted
        outputs: list[EngineOutput] = []
        for item in items:
            if type(item) is Closed:
                done.add(item.index)
                continue
            assert type(item) is EngineOutput
            if aborted and item.index in aborted:
                continue
            if item.finish is not None:
                done.add(item.index)
            outputs.append(item)
        if len(done) >= self._request.n:
            self._over = True
        return merge_outputs(outputs) if len(outputs) > 1 else outputs

    def _close(self) -> None:
        """Once: abort what still runs, and let the engine forget the request."""
        if self._closed:
            return
        self._closed = True
        opening, self._opening = self._opening, None
        if opening is not None:
            opening.cancel()  # (an admission under way: the engine drops it)
        req = self._req
        if req is not None:
            req.stream = None
            self._engine.forget(self._request.request_id, abort=not self._over)
        if self._using is not None:
            using, self._using = self._using, None
            using.__exit__(None, None, None)
