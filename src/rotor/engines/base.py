"""What every engine offers the pipeline: a card and a stream of EngineOutput per request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol.engine import EngineOutput, EngineRequest


class EngineError(Exception):
    """The engine cannot run this request (bad `mock` script, unsupported option)."""


class Engine(Protocol):
    card: ModelCard
    tokenizer: Tokenizer | None

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        """Stream outputs for all `request.n` choices (each tagged with its `index`).

        Closing the iterator early (the client went away) must abort the work at
        once; `abort` stops a single choice that the frontend has finished.
        """
        ...

    def abort(self, request_id: str, index: int | None = None) -> None: ...

    def state(self) -> dict[str, Any]:
        """Engine state for /health and metrics (queue sizes, active requests)."""
        ...
