"""Per-token cost of each API's streaming shaper: internal events → the API's
own events → SSE bytes, for a 128-token plain answer (one token per event).

    python benchmarks/shaper_bench.py

Measures the shaping layer alone (no engine, no decode, no socket), which is
the part that differs between the OpenAI, Anthropic and Responses APIs.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

from rotor.api.anthropic.stream import MessageStream
from rotor.api.openai.chat import ChatShaper
from rotor.api.responses.items import response_head
from rotor.api.responses.stream import ResponseStream
from rotor.api.sse import named_event, sse_event
from rotor.frontend import StartedResponse
from rotor.model.card import ModelCard
from rotor.pipeline.decode import End
from rotor.pipeline.events import ChoiceEvent, Finished, Usage
from rotor.pipeline.parse.base import Content
from rotor.pipeline.served import ServedModel
from rotor.protocol.flow import Pulled, Pump
from rotor.protocol.responses import ResponsesRequest

TOKENS = 128
ROUNDS = 400


def events() -> list[ChoiceEvent]:
    out = [ChoiceEvent(0, [Content(f"tok{i} ")]) for i in range(TOKENS - 1)]
    out.append(ChoiceEvent(0, [Content("end")], [], Finished("stop", None, End.MODEL_EOS)))
    return out


class _Counted:
    tokens = TOKENS


def response() -> StartedResponse:
    usage = Usage(20, [_Counted()])  # type: ignore[list-item]
    events = Pulled(Pump(_no_events()))  # (the shapers never read them)
    return StartedResponse("chatcmpl-x", ServedModel(ModelCard("m")), "m", 0, 1, usage, events)


async def _no_events() -> AsyncGenerator[ChoiceEvent, None]:
    return
    yield


def run(name: str, make, encode) -> float:  # noqa: ANN001
    evs = events()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(ROUNDS):
            shaper = make()
            for e in shaper.start():
                encode(e)
            for ev in evs:
                for e in shaper.event(ev):
                    encode(e)
            for e in shaper.finish():
                encode(e)
        best = min(best, (time.perf_counter() - start) / (ROUNDS * TOKENS))
    print(f"{name:10s} {best * 1e6:6.2f} µs/token")
    return best


def main() -> None:
    req = ResponsesRequest(model="m", input="hi")
    openai = run("openai", lambda: ChatShaper(response()), sse_event)
    anthropic = run("anthropic", lambda: MessageStream(response(), "r"), named_event)
    head = response_head(req, response(), "r")
    responses = run("responses", lambda: ResponseStream(head, response(), "r"), named_event)
    print(
        f"anthropic / openai = {anthropic / openai:.2f}, responses / openai = {responses / openai:.2f}"
    )


if __name__ == "__main__":
    main()
