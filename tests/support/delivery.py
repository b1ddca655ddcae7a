"""A pushed stream's reader that records what it is delivered: its outputs
(`outputs_`) and its end (`end`: "open" until it ends, then None, or the
error's message)."""

from __future__ import annotations

from typing import Any

from rotor.protocol.engine import EngineError, EngineOutput


class Delivery:
    def __init__(self) -> None:
        self.outputs_: list[EngineOutput] = []
        self.end: Any = "open"

    def outputs(self, outputs: list[EngineOutput]) -> bool:
        self.outputs_ += outputs
        return True

    def ended(self, error: EngineError | None) -> None:
        self.end = error.message if error is not None else None
