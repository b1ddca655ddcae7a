"""`POST /tokenize` with messages counts the prompt exactly as chat prepares it.

Whatever decides the prompt (tools, and whether `tool_choice` leaves them
out) decides the count the same way, so `count` is chat's `prompt_tokens`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.server import Server, rotor_server

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
        yield srv


def tokenize(server: Server, **body: Any) -> dict[str, Any]:
    r = httpx.post(server.url + "/tokenize", json={"messages": MESSAGES, **body}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def chat_prompt_tokens(server: Server, **body: Any) -> int:
    # under `required` the script must make a call (anything else is a 400 naming `mock`)
    calls = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'
    script = calls if body.get("tool_choice") == "required" else "ok"
    payload = {"messages": MESSAGES, "max_tokens": 50, "mock": {"output": script}, **body}
    r = httpx.post(server.v1 + "/chat/completions", json=payload, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens"]


@pytest.mark.parametrize("tool_choice", [None, "auto", "none", "required"])
def test_count_is_chats_prompt_tokens(server: Server, tool_choice: str | None) -> None:
    extra: dict[str, Any] = {"tools": TOOLS}
    if tool_choice is not None:
        extra["tool_choice"] = tool_choice
    counted = tokenize(server, **extra)
    assert counted["count"] == len(counted["tokens"])
    assert counted["count"] == chat_prompt_tokens(server, **extra)


def test_tool_choice_none_leaves_the_tools_out_of_the_count(server: Server) -> None:
    without = tokenize(server)["count"]
    assert tokenize(server, tools=TOOLS)["count"] > without
    assert tokenize(server, tools=TOOLS, tool_choice="none")["count"] == without


def test_a_bad_tool_choice_is_a_400_naming_it(server: Server) -> None:
    r = httpx.post(
        server.url + "/tokenize",
        json={"messages": MESSAGES, "tool_choice": "required"},  # no tools
        timeout=10,
    )
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "tool_choice"
