"""Sixteen concurrent chat requests with 1 MB `mock` scripts against a real
`rotor run out=mocker`: each is answered in full, and `/live` is answered
while the scripts are being tokenized — the server's own log (debug) orders
what its event loop did, so no clock is read."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import httpx
import orjson
import pytest

from support.server import Server, rotor_server

CONTEXT = 4096  # --max-model-len: a 1 MB script plays its first ~4k tokens
BIG = 16
MB = 1 << 20
MESSAGES = [{"role": "user", "content": "hi"}]
OFF_LOOP = "its mock script is tokenized off the event loop"
BACK = "its mock script is tokenized ("


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    args = ("--speedup-ratio", "0", "--max-model-len", str(CONTEXT), "--log-level", "debug")
    with rotor_server("out=mocker", *args) as srv:
        yield srv


def scripts(i: int) -> list[str]:
    """Request i's script: one ~1 MB text, or (every fourth) two of ~512 KB."""
    if i % 4 == 3:
        return [f"choice {c} of {i}: " + "dolor sit " * (MB // 20) for c in range(2)]
    return [f"script {i}: " + "lorem ipsum " * (MB // 12)]


def body(i: int) -> bytes:
    texts = scripts(i)
    output: str | list[str] = texts[0] if len(texts) == 1 else texts
    data = {
        "model": "mock-model",
        "messages": MESSAGES,
        "n": len(texts),
        "mock": {"output": output},
    }
    return orjson.dumps(data)


async def send_all(url: str) -> list[httpx.Response]:
    bodies = [body(i) for i in range(BIG)]  # encoded before any is sent
    headers = {"content-type": "application/json"}
    limits = httpx.Limits(max_connections=BIG)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        return await asyncio.gather(
            *(http.post("/v1/chat/completions", content=b, headers=headers) for b in bodies)
        )


def test_live_answers_while_sixteen_1mb_scripts_are_tokenized(server: Server) -> None:
    statuses: list[int] = []
    finished = threading.Event()

    def poll_live() -> None:  # one /live after another until the big requests are answered
        with httpx.Client(base_url=server.url, timeout=120) as http:
            while not finished.is_set():
                statuses.append(http.get("/live").status_code)

    poller = threading.Thread(target=poll_live)
    poller.start()
    try:
        answers = asyncio.run(send_all(server.url))
    finally:
        finished.set()
        poller.join()

    for i, response in enumerate(answers):
        assert response.status_code == 200, response.text
        answer = response.json()
        usage = answer["usage"]
        texts = scripts(i)
        assert len(answer["choices"]) == len(texts)
        for choice in answer["choices"]:
            # The sequence fills: the script's first tokens, as many as it holds.
            assert choice["finish_reason"] == "length"
            content = choice["message"]["content"]
            assert len(content) > CONTEXT // 2
            assert texts[choice["index"]].startswith(content)
        assert usage["completion_tokens"] == len(texts) * (CONTEXT - usage["prompt_tokens"])
    assert statuses and set(statuses) == {200}

    # In the server's log, in the order its loop wrote them: a /live answered
    # while at least one script was in the script pool.
    tokenizing = 0
    live_meanwhile = 0
    for line in server.log.splitlines():
        if OFF_LOOP in line:
            tokenizing += 1
        elif BACK in line:
            tokenizing -= 1
        elif "GET /live 200" in line and tokenizing > 0:
            live_meanwhile += 1
    engine_requests = sum(len(scripts(i)) for i in range(BIG))  # one per choice
    assert server.log.count(OFF_LOOP) == engine_requests  # every script went off the loop
    assert server.log.count(BACK) == engine_requests
    assert live_meanwhile > 0, "no /live was answered while a script was tokenized"
