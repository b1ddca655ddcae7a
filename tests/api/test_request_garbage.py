"""A finished request leaves nothing for the garbage collector.

Objects caught in a reference cycle wait for a collection, and by then they
have aged into the older generations, whose collections walk everything: a
request graph left in a cycle per request made the server stall for tens of
milliseconds at a time under load. The server here is shaped like uvicorn's:
its request cycle holds the scope, and `send` is a method bound to it.
"""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.model.builtin import builtin_test_model

from support.app import app_over


class ServerCycle:
    """One request, as a server holds it: the scope, the body, what was sent."""

    def __init__(self, path: str, body: dict[str, Any], leave_early: bool = False) -> None:
        self.leave_early = leave_early  # the client goes away after the first write
        self.body = json.dumps(body).encode()
        length = str(len(self.body)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", length)]
        self.scope: dict[str, Any] = {
            "type": "http",
            "method": "POST",
            "path": path,
            "headers": headers,
            "query_string": b"",
        }
        self.read = False
        self.complete = asyncio.Event()
        self.status = 0
        self.ended = False  # the response's last write came

    async def receive(self) -> dict[str, Any]:
        if not self.read:
            self.read = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.complete.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        else:
            self.ended = not message.get("more_body")
            if self.ended or self.leave_early:
                self.complete.set()


@pytest.fixture
async def app() -> AsyncIterator[Any]:
    card, tok = builtin_test_model()
    # a step at a time: a client that leaves after the first write leaves mid-answer
    engine = MockerEngine(card, tok, MockerConfig(speedup_ratio=0, step_slice_ms=0))
    async with app_over(engine) as app:
        yield app


async def serve(
    app: Any, path: str, body: dict[str, Any], leave_early: bool = False
) -> weakref.ref[ServerCycle]:
    cycle = ServerCycle(path, body, leave_early)
    await app(cycle.scope, cycle.receive, cycle.send)
    assert cycle.status == 200 and cycle.complete.is_set()
    assert cycle.ended is not leave_early  # a client that left got no end
    return weakref.ref(cycle)


CHAT = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {**CHAT, "stream": True}),
        ("/v1/chat/completions", CHAT),
        ("/v1/messages", {**CHAT, "stream": True}),
        ("/v1/completions", {"prompt": "hello", "max_tokens": 8, "stream": True}),
    ],
)
async def test_a_finished_request_is_freed_without_the_garbage_collector(
    app: Any, path: str, body: dict[str, Any]
) -> None:
    await serve(app, path, body)  # warm: first-use caches are not the request's
    gc.collect()
    gc.disable()
    try:
        cycle = await serve(app, path, body)
        await asyncio.sleep(0)  # the request's finished tasks let go of their frames
        assert cycle() is None  # freed by reference counting alone
        assert gc.collect() == 0  # and nothing else of it was left in a cycle
    finally:
        gc.enable()


async def test_a_request_whose_client_left_is_freed_without_the_garbage_collector(app: Any) -> None:
    body = {**CHAT, "max_tokens": 2000, "stream": True, "ignore_eos": True}
    path = "/v1/chat/completions"
    await serve(app, path, body, leave_early=True)
    gc.collect()
    gc.disable()
    try:
        cycle = await serve(app, path, body, leave_early=True)
        for _ in range(3):
            await asyncio.sleep(0)  # the engine drops the aborted request on its next turn
        assert cycle() is None
        assert gc.collect() == 0
    finally:
        gc.enable()
