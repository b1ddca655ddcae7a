"""The app in process (httpx's ASGI transport) over a mocker whose tokenizer
holds long texts at a gate: while concurrent 1 MB `mock` scripts are being
tokenized, the event loop still answers `/live` and whole other requests,
and once the gate opens every big request is answered in full."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from rotor.api.body import OFF_LOOP_BYTES
from rotor.engines.mocker import MockerConfig, MockerEngine

from support.app import app_over
from support.gated import GatedTokenizer
from support.mocker import CARD, TOK

BIG = 4  # concurrent big requests
CONTEXT = 512  # tokens a sequence holds: a 1 MB script plays its first few hundred
MESSAGES = [{"role": "user", "content": "hi"}]


def script(i: int) -> str:
    return f"script {i}: " + "lorem ipsum " * (OFF_LOOP_BYTES // 12)


def body(i: int) -> bytes:
    """A chat request of over 1 MB, almost all of it its script."""
    data = orjson.dumps({"model": CARD.name, "messages": MESSAGES, "mock": {"output": script(i)}})
    assert len(data) > OFF_LOOP_BYTES
    return data


@pytest.fixture
async def app() -> AsyncIterator[tuple[httpx.AsyncClient, GatedTokenizer]]:
    tok = GatedTokenizer(TOK)
    blocks = CONTEXT // 16
    engine = MockerEngine(CARD, tok, MockerConfig(speedup_ratio=0, num_kv_blocks=blocks))
    # the frontend's tokenizer is the plain one: only the mocker's holds scripts at the gate
    async with app_over(engine, tokenizer=TOK) as app:
        transport = httpx.ASGITransport(app=app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://rotor") as http:
                yield http, tok
        finally:
            tok.gate.set()  # never leave a script thread waiting (before the system stops)


async def test_live_answers_while_big_scripts_are_tokenized(
    app: tuple[httpx.AsyncClient, GatedTokenizer],
) -> None:
    http, tok = app
    headers = {"content-type": "application/json"}

    async def chat(i: int) -> httpx.Response:
        return await http.post("/v1/chat/completions", content=body(i), headers=headers)

    big = [asyncio.ensure_future(chat(i)) for i in range(BIG)]
    await tok.reached(*big)
    # A script is being tokenized now (it waits at the gate): the loop answers
    # /live, and a small chat runs from start to end meanwhile.
    live = await http.get("/live")
    assert live.status_code == 200
    assert live.json() == {"status": "live"}
    small: dict[str, Any] = {"model": CARD.name, "messages": MESSAGES, "mock": {"output": "Hi"}}
    r = await http.post("/v1/chat/completions", json=small)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "Hi"
    assert not any(task.done() for task in big)

    tok.gate.set()
    for i, response in enumerate(await asyncio.gather(*big)):
        assert response.status_code == 200, response.text
        answer = response.json()
        (choice,) = answer["choices"]
        usage = answer["usage"]
        # The sequence fills: the script's first tokens, as many as it holds.
        assert choice["finish_reason"] == "length"
        assert usage["prompt_tokens"] + usage["completion_tokens"] == CONTEXT
        content = choice["message"]["content"]
        assert content.startswith(f"script {i}: lorem ipsum")
        assert script(i).startswith(content)
    assert all(name.startswith("rotor-mocker-script") for name in tok.long_on)
