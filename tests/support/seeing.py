"""An engine that keeps every request it is handed (the mocker behind it
answers, as if the prompt were text: its card takes no images): what a
transport delivered, for the runtime's tests."""

from __future__ import annotations

from dataclasses import replace

from rotor.engines.mocker import MockerEngine
from rotor.protocol.engine import EngineRequest, EngineState, EngineStream


class Seeing:
    def __init__(self, engine: MockerEngine) -> None:
        self.inner = engine
        self.card = engine.card
        self.seen: list[EngineRequest] = []

    def generate(self, request: EngineRequest) -> EngineStream:
        self.seen.append(request)
        return self.inner.generate(replace(request, images=[]))

    def state(self) -> EngineState:
        return self.inner.state()

    def abort(self, request_id: str) -> None:
        self.inner.abort(request_id)
