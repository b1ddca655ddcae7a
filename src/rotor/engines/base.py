"""What every engine offers the pipeline: a card and a stream of EngineOutput per request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol.engine import EngineOutput, EngineRequest


class EngineError(Exception):
    """The engine cannot run this request (bad `mock` script, unsupported option).

    `param` names the request field at fault, as the API spells it ("mock", "n",
    "max_tokens", "prompt"), or is None when no field is (a duplicate request id,
    an engine that is not started).
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class Engine(Protocol):
    card: ModelCard
    tokenizer: Tokenizer | None

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def validate(self, request: EngineRequest) -> None:
        """Raise EngineError if this request cannot run, before any work is done.

        The frontend calls it before it starts streaming, so a request the engine
        refuses is a 400 naming `EngineError.param`, not a broken stream;
        `generate` checks again (and may raise the same error on first iteration).
        """
        ...

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        """Stream outputs for all `request.n` choices (each tagged with its `index`).

        Closing the iterator early (the client went away) must abort the work at
        once; `abort` stops a single choice that the frontend has finished. A
        `request_id` that is already running is refused with EngineError.
        """
        ...

    def abort(self, request_id: str, index: int | None = None) -> None: ...

    def state(self) -> dict[str, Any]:
        """Engine state for /health and metrics (queue sizes, active requests)."""
        ...
