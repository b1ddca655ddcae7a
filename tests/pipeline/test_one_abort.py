"""One abort per ended choice: a choice the frontend ends itself (a stop
string) stops its engine request once — by stopping the engine's
stream — and a choice the engine ended sends none."""

from __future__ import annotations

from typing import Any

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.decode import ChoiceDecoder
from rotor.pipeline.events import Usage
from rotor.pipeline.generate import ChoiceRun
from rotor.pipeline.parse.message import MessageParser
from rotor.protocol.engine import StopParams
from rotor.protocol.flow import Pulled

from support.mocker import CARD, TOK, request


class CountingMocker(MockerEngine):
    """The real mocker, counting the aborts it is asked for (by the
    pipeline, or by its own stream's close)."""

    def __init__(self) -> None:
        super().__init__(CARD, TOK, MockerConfig(speedup_ratio=0, step_slice_ms=0))
        self.aborts: list[tuple[str, Any]] = []

    def abort(self, request_id: str, index: int | None = None) -> None:
        self.aborts.append((request_id, index))
        super().abort(request_id, index)


def choice(stop: StopParams, stop_strings: list[str] | None = None) -> ChoicePipeline:
    decoder = ChoiceDecoder(
        stop, stop_strings, False, decoder=TOK.decoder(True), token_text=TOK.decode
    )
    return ChoicePipeline(0, decoder, MessageParser())


async def run(engine: CountingMocker, stop_strings: list[str] | None, **stop: Any) -> str:
    params = StopParams(eos_token_ids=list(CARD.eos_token_ids), **stop)
    req = request({"output": "one two three four five six"}, stop=params)
    pipe = choice(params, stop_strings)
    usage = Usage(0, [pipe.decoder])
    events = [e async for e in Pulled(ChoiceRun(engine, req, pipe, 0, usage, True))]
    assert events[-1].finished is not None
    return events[-1].finished.finish_reason


async def test_a_choice_the_frontend_ends_is_aborted_once() -> None:
    engine = CountingMocker()
    await engine.start()
    try:
        assert await run(engine, ["three"], max_tokens=100) == "stop"
        assert len(engine.aborts) == 1
    finally:
        await engine.stop()


async def test_a_choice_the_engine_ended_is_not_aborted() -> None:
    engine = CountingMocker()
    await engine.start()
    try:
        assert await run(engine, None, max_tokens=100) == "stop"  # the script's EOS
        assert engine.aborts == []
    finally:
        await engine.stop()
