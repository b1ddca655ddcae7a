"""The OpenAI Agents SDK against rotor: a tool-calling agent over two runs,
its turns chained by `previous_response_id` (the SDK sends only each
turn's new items), the mocker scripted to call the tool and then answer.

The frontends the turns go to are a fixture (`frontends`): each request
goes to the next in turn. With one `rotor run` the chain lives in its SQLite
file; with two `rotor frontend`s over NATS (one mocker worker) every turn
lands on the other frontend than the turn before, so each continues a
response the other stored, through the shared JetStream bucket.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

from support.cluster import nats_server, start_frontend, start_worker
from support.scripts import hermes
from support.server import Server, rotor_server

MODEL = "mock-model"


@pytest.fixture(scope="module", params=["rotor run", "two frontends over NATS"])
def frontends(request: pytest.FixtureRequest) -> Iterator[list[Server]]:
    """The servers the agent's requests go to, in turn."""
    if request.param == "rotor run":
        with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
            yield [srv]
        return
    with nats_server() as nats:
        worker = start_worker(nats, "out=mocker", "--speedup-ratio", "0")
        started = [start_frontend(nats), start_frontend(nats)]
        try:
            for frontend in started:
                frontend.wait_workers(MODEL, {worker.id})
            yield list(started)
        finally:
            for frontend in started:
                frontend.proc.stop()
            worker.proc.stop()


@pytest.fixture
def base_urls(frontends: list[Server]) -> list[str]:
    """The `/v1` URLs the agent's requests go to, in turn."""
    return [f.v1 for f in frontends]


class Turns(httpx.AsyncBaseTransport):
    """Each request to the next of `urls` in turn; each POST /responses plays
    the model's next scripted output (its `mock`). Keeps what the SDK sent."""

    def __init__(self, urls: list[str], script: list[str]) -> None:
        self.urls = [httpx.URL(u) for u in urls]
        self.script = list(script)
        self.sent: list[dict[str, Any]] = []
        self.turn = 0
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        base = self.urls[self.turn % len(self.urls)]
        self.turn += 1
        url = request.url.copy_with(scheme=base.scheme, host=base.host, port=base.port)
        content = await request.aread()
        if request.method == "POST" and request.url.path.endswith("/responses"):
            body = json.loads(content)
            self.sent.append(dict(body))
            body["mock"] = {"output": self.script.pop(0)}
            content = json.dumps(body).encode()
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
        forwarded = httpx.Request(request.method, url, headers=headers, content=content)
        return await self.inner.handle_async_request(forwarded)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
async def turns(base_urls: list[str]) -> AsyncIterator[Turns]:
    script = [
        hermes("get_weather", {"city": "Paris"}),
        "Sunny in Paris.",
        hermes("get_weather", {"city": "Rome"}),
        "Sunny in Rome too.",
    ]
    transport = Turns(base_urls, script)
    yield transport
    await transport.aclose()


async def test_a_tool_calling_agent_chains_its_turns(frontends: list[Server], turns: Turns) -> None:
    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(
        base_url=str(turns.urls[0]),
        api_key="unused",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=turns, timeout=30),
    )
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        asked.append(city)
        return f"sunny in {city}"

    agent = Agent(
        name="weather",
        instructions="Answer briefly.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
    )
    first = await Runner.run(agent, "Weather in Paris?", auto_previous_response_id=True)
    assert (first.final_output, asked) == ("Sunny in Paris.", ["Paris"])
    second = await Runner.run(agent, "And Rome?", previous_response_id=first.last_response_id)
    assert (second.final_output, asked) == ("Sunny in Rome too.", ["Paris", "Rome"])

    # The SDK sent each turn's new items only, chained to the response before.
    ids = [r.response_id for r in (*first.raw_responses, *second.raw_responses)]
    assert [s.get("previous_response_id") for s in turns.sent] == [None, *ids[:3]]
    assert [[i.get("type", "message") for i in s["input"]] for s in turns.sent] == [
        ["message"],
        ["function_call_output"],
        ["message"],
        ["function_call_output"],
    ]

    # The last turn's prompt was the whole conversation, rendered by the server.
    def call(response: Any) -> dict[str, Any]:
        (item,) = response.output
        return {
            "id": item.call_id,
            "type": "function",
            "function": {"name": item.name, "arguments": item.arguments},
        }

    paris, rome = first.raw_responses[0], second.raw_responses[0]
    chat = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call(paris)]},
        {"role": "tool", "tool_call_id": call(paris)["id"], "content": "sunny in Paris"},
        {"role": "assistant", "content": "Sunny in Paris."},
        {"role": "user", "content": "And Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [call(rome)]},
        {"role": "tool", "tool_call_id": call(rome)["id"], "content": "sunny in Rome"},
    ]
    tools = [
        {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
        for t in turns.sent[-1]["tools"]
    ]
    prompt = frontends[0].tokenize(messages=chat, tools=tools)
    assert second.raw_responses[-1].usage.input_tokens == len(prompt)
    await client.close()
