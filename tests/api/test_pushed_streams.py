"""Streams pushed by the engine (the mocker hands each step's outputs to the
response, which writes them in the engine's turn) against the same streams
made by a generator engine (the mocker wrapped as one, pumped as echo's and
vLLM's streams are): byte for byte the same for any answer, API, stop and
limit, in slices or a step at a time; and the push path's own cases — a client that reads slowly holds the engine until
it catches up, a client that leaves stops it, a bug while shaping ends the
stream with its failure event."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.engines.mocker.stream import MockerStream
from rotor.model.builtin import builtin_test_model
from rotor.protocol.engine import EngineOutput, EngineRequest, pulled
from rotor.protocol.flow import Pump

from support.app import app_over
from support.shaping import break_chat_shaping
from support.wait import wait_for_async

CARD, TOK = builtin_test_model()
TIMEOUT_S = 10


class Generated:
    """The mocker as an engine that is a generator (as echo and vLLM are):
    its streams are pulled one output at a time and pumped into a source,
    a task hop per output, where the mocker's own push in its own turn."""

    def __init__(self, engine: MockerEngine) -> None:
        self.engine = engine
        self.card = engine.card
        self.tokenizer = engine.tokenizer

    def generate(self, request: EngineRequest) -> Pump[EngineOutput]:
        return Pump(self._outputs(request))

    async def _outputs(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        outputs = pulled(self.engine.generate(request))
        try:
            async for out in outputs:
                yield out
        finally:
            await outputs.aclose()

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)

    def state(self) -> Any:
        return self.engine.state()


class Client:
    """One connection: `gate` (when set) holds every `hold_every`-th write
    until the test opens it, as a full socket holds the server's writes."""

    def __init__(self, body: dict[str, Any], hold_every: int = 0) -> None:
        self.body = json.dumps(body).encode()
        self.chunks: list[bytes] = []
        self.left = asyncio.Event()
        self.done = asyncio.Event()
        self.hold_every = hold_every
        self.gate = asyncio.Event()
        self.gate.set()
        self.writes = 0
        self._read = False

    def scope(self, path: str) -> dict[str, Any]:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.body)).encode()),
            (b"x-request-id", b"same-id"),
        ]
        return {
            "type": "http",
            "method": "POST",
            "path": path,
            "headers": headers,
            "query_string": b"",
        }

    async def receive(self) -> dict[str, Any]:
        if not self._read:
            self._read = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] != "http.response.body":
            return
        self.writes += 1
        if self.hold_every and self.writes % self.hold_every == 0:
            self.gate.clear()
            await self.gate.wait()
        self.chunks.append(message["body"])
        if not message.get("more_body"):
            self.done.set()

    @property
    def text(self) -> str:
        raw = b"".join(self.chunks).decode()
        return re.sub(r'"(created|created_at)":\d+', r'"\1":0', raw)


async def stream(app: Any, path: str, body: dict[str, Any], **client: Any) -> Client:
    c = Client(body, **client)
    await asyncio.wait_for(app(c.scope(path), c.receive, c.send), TIMEOUT_S)
    return c


PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "messages": "/v1/messages",
    "responses": "/v1/responses",
}


def body_for(api: str, script: dict[str, Any], max_tokens: int, stop: list[str]) -> dict[str, Any]:
    common: dict[str, Any] = {"stream": True, "mock": script}
    if api == "responses":
        return {"input": "hi", "max_output_tokens": max_tokens, **common}
    if api == "completions":
        return {"prompt": "hi", "max_tokens": max_tokens, "stop": stop or None, **common}
    key = "stop_sequences" if api == "messages" else "stop"
    extra = {key: stop} if stop else {}
    return {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        **common,
        **extra,
    }


@pytest.fixture(params=[0.0, 1.0], ids=["step", "slice"])
async def both(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Any, MockerEngine]]:
    """One mocker (a step at a time, or 1 ms slices) behind two apps: one
    whose streams it pushes, one that must pull them."""
    mocker = MockerEngine(CARD, TOK, MockerConfig(speedup_ratio=0, step_slice_ms=request.param))
    async with (
        app_over(mocker) as pushed,
        app_over(
            Generated(mocker), engines=[mocker]
        ) as pulled,  # the mocker starts, not its wrapper
    ):
        yield pushed, pulled, mocker


# The apps serve each example's two requests afresh; only the engine is shared.
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    api=st.sampled_from(sorted(PATHS)),
    text=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60),
    per_step=st.integers(1, 4),
    end=st.sampled_from(["stop", "length", "eos", "error"]),
    max_tokens=st.integers(1, 80),
    stop=st.lists(st.sampled_from(["a", "é", "xy", "\n"]), max_size=2),
)
async def test_pushed_and_pulled_streams_are_the_same_bytes(
    both: tuple[Any, Any, MockerEngine],
    api: str,
    text: str,
    per_step: int,
    end: str,
    max_tokens: int,
    stop: list[str],
) -> None:
    pushed, pulled, _ = both
    script = {"output": text, "end": end, "tokens_per_step": per_step}
    body = body_for(api, script, max_tokens, stop if api != "responses" else [])
    a = await stream(pushed, PATHS[api], body)
    b = await stream(pulled, PATHS[api], body)
    ours, theirs = events(a.text), events(b.text)
    if end == "error" and text_of(ours) != text_of(theirs):
        # Text that comes with the engine's error is not sent (the choice
        # fails in its place), so what went before the error depends on
        # whether a reader that fell behind had it merged into that last
        # output: one stream's text runs on from the other's, and both end
        # with the same failure (whose closing events may repeat the text).
        (before, failure), (their_before, their_failure) = at_error(ours), at_error(theirs)
        assert failure[:1] == their_failure[:1] != []
        assert kinds(failure) == kinds(their_failure)
        said, they_said = text_of(before), text_of(their_before)
        assert said.startswith(they_said) or they_said.startswith(said)
    else:
        assert ours == theirs


def text_of(evs: list[Any]) -> str:
    """The text of a stream's text deltas (of any kind), in order."""
    return "".join(e[1] for e in evs if isinstance(e, tuple))


def at_error(evs: list[Any]) -> tuple[list[Any], list[Any]]:
    """A stream's events cut at its error event (what follows it: empty if none)."""
    for i, e in enumerate(evs):
        if isinstance(e, dict) and (e.get("type") == "error" or set(e) == {"error"}):
            return evs[:i], evs[i:]
    return evs, []


def kinds(evs: list[Any]) -> list[Any]:
    """Each event's type (its keys where it has none), or the event itself."""
    return [e.get("type", sorted(e)) if isinstance(e, dict) else e for e in evs]


def events(sse: str) -> list[Any]:
    """A stream's events, with what timing alone may change taken out: a
    reader that fell behind reads several steps as one event (the engine
    merges what piled up), so runs of text deltas of one kind are joined,
    and the Responses API's event numbers dropped. The bytes of each event
    are compared strictly elsewhere (api/test_streamed.py)."""
    out: list[Any] = []
    for block in sse.split("\n\n"):
        data = next((line[6:] for line in block.split("\n") if line.startswith("data: ")), None)
        if data is None:
            continue
        event = json.loads(data) if data != "[DONE]" else data
        for part in _parts(event):
            delta = _text_delta(part)
            if delta is not None and out and isinstance(out[-1], tuple) and out[-1][0] == delta[0]:
                out[-1] = (delta[0], out[-1][1] + delta[1])
                continue
            out.append(delta if delta is not None else part)
    return out


def _parts(event: Any) -> list[Any]:
    """A completions chunk that ends its choice with text (what piled up
    goes out with the finish) as its text, then its finish."""
    choices = event.get("choices") if isinstance(event, dict) else None
    if choices and len(choices) == 1 and choices[0].get("text") and choices[0]["finish_reason"]:
        text = {**choices[0], "finish_reason": None}
        text.pop("stop_reason", None)
        return [{**event, "choices": [text]}, {**event, "choices": [{**choices[0], "text": ""}]}]
    return [event]


def _text_delta(event: Any) -> tuple[str, str] | None:
    """(kind, text) of an event that carries only a piece of text."""
    if not isinstance(event, dict):
        return None
    event.pop("sequence_number", None)
    choices = event.get("choices")
    if choices and len(choices) == 1 and choices[0].get("finish_reason") is None:
        choice = choices[0]
        delta = choice.get("delta", {})
        if set(delta) == {"content"} and "usage" not in event:
            return (f"content{choice['index']}", delta["content"])
        if "text" in choice and not choice.get("logprobs"):
            return (f"text{choice['index']}", choice["text"])
    if event.get("type") == "content_block_delta" and event["delta"].get("type") == "text_delta":
        return (f"block{event['index']}", event["delta"]["text"])
    if event.get("type") == "response.output_text.delta":
        return (f"item{event['output_index']}", event["delta"])
    return None


def test_the_mocker_pushes_and_the_wrapper_does_not() -> None:
    """The two apps above really take the two paths."""
    mocker = MockerEngine(CARD, TOK)
    request = EngineRequest("r", CARD.name, TOK.encode("hi"))
    assert isinstance(mocker.generate(request), MockerStream)
    assert isinstance(Generated(mocker).generate(request), Pump)


async def test_a_slow_client_holds_the_engine_until_it_catches_up(
    both: tuple[Any, Any, MockerEngine],
) -> None:
    pushed, pulled, mocker = both
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3000}
    body |= {"stream": True, "ignore_eos": True, "seed": 7}
    c = Client(body, hold_every=2)
    task = asyncio.ensure_future(pushed(c.scope(PATHS["chat"]), c.receive, c.send))
    for _ in range(3):  # each time the client stops reading, the engine stops with it
        await wait_for_async(
            "the client to stop reading", lambda: not c.gate.is_set(), TIMEOUT_S, pause=0
        )
        made = mocker.tokens_generated
        for _ in range(50):
            await asyncio.sleep(0)
        assert mocker.tokens_generated - made <= 4  # at most the step already under way
        c.gate.set()
    c.hold_every = 0
    c.gate.set()
    await asyncio.wait_for(task, TIMEOUT_S)
    reference = await stream(pulled, PATHS["chat"], body)
    assert events(c.text) == events(reference.text)
    assert '"finish_reason":"length"' in c.text


async def test_a_client_that_leaves_stops_a_pushed_stream(
    both: tuple[Any, Any, MockerEngine],
) -> None:
    pushed, _, mocker = both
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000}
    c = Client({**body, "stream": True, "ignore_eos": True})
    task = asyncio.ensure_future(pushed(c.scope(PATHS["chat"]), c.receive, c.send))
    await wait_for_async("five chunks written", lambda: len(c.chunks) >= 5, TIMEOUT_S, pause=0)
    c.left.set()
    await asyncio.wait_for(task, TIMEOUT_S)
    for _ in range(5):
        await asyncio.sleep(0)
    state = mocker.state()
    assert (state.running, state.waiting, state.active_requests) == (0, 0, 0)
    assert state.kv_blocks_free == state.kv_blocks_total
    assert not c.done.is_set()  # it left: no end was written


async def test_a_bug_while_shaping_a_pushed_event_ends_the_stream_with_its_failure(
    both: tuple[Any, Any, MockerEngine],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pushed, _, mocker = both
    break_chat_shaping(monkeypatch, on_call=2)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000}
    with caplog.at_level(logging.ERROR, "rotor.api"):
        c = await stream(pushed, PATHS["chat"], {**body, "stream": True, "ignore_eos": True})
    assert c.done.is_set()
    assert c.text.endswith('"code":500}}\n\ndata: [DONE]\n\n')
    assert "a shaping bug" in caplog.text
    for _ in range(5):
        await asyncio.sleep(0)
    assert mocker.state().running == 0
