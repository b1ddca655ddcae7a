"""harmony (gpt-oss) under `tool_choice` through HTTP: the mocker plays a scripted
turn in which the model calls a tool. With active tools it is a call; under
`none` the parser still frames channels but nothing may be called, so no call
is returned: the call segment's body is content, the analysis is reasoning, no
marker reaches the client (docs/tool-calling.md, tool_choice). Without tools
(and no `none`) the call is returned, to an undeclared tool. Streaming and
not, at one and four tokens per engine step."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.models import harmony_model
from support.server import Server, rotor_server
from support.sse import data_events
from support.tool_choice import MESSAGES, TOOLS

ANALYSIS = "<|channel|>analysis<|message|>Need the weather.<|end|>"
PREAMBLE = "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>"
CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}<|call|>'
)
BODY = '{"city": "Paris"}'
NONE = {"tools": TOOLS, "tool_choice": "none"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model = harmony_model(Path(tmp_path_factory.mktemp("harmony")))
    with rotor_server(
        "out=mocker",
        "--model-path",
        str(model),
        "--tool-call-parser",
        "harmony",
        "--speedup-ratio",
        "0",
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


def _body(server: Server, output: str, per_step: int, fields: dict[str, Any]) -> dict[str, Any]:
    model = httpx.get(server.v1 + "/models", timeout=5).json()["data"][0]["id"]
    return {
        "model": model,
        "messages": MESSAGES,
        "mock": {"output": output, "end": "eos", "tokens_per_step": per_step},
        **fields,
    }


def _whole(http: httpx.Client, server: Server, body: dict[str, Any]) -> dict[str, Any]:
    r = http.post(server.v1 + "/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert "<|" not in r.text and "|>" not in r.text, r.text
    choice = r.json()["choices"][0]
    msg = choice["message"]
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in msg.get("tool_calls") or []
    ]
    return {
        "content": msg["content"],
        "reasoning": msg.get("reasoning_content"),
        "calls": calls,
        "finish": choice["finish_reason"],
    }


def _streamed(http: httpx.Client, server: Server, body: dict[str, Any]) -> dict[str, Any]:
    with http.stream("POST", server.v1 + "/chat/completions", json={**body, "stream": True}) as r:
        raw = r.read().decode()
    assert r.status_code == 200, raw
    assert "<|" not in raw and "|>" not in raw, raw
    content, reasoning, calls, finishes = "", None, [], []
    for chunk in data_events(raw):
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            if "reasoning_content" in delta:
                reasoning = (reasoning or "") + delta["reasoning_content"]
            for c in delta.get("tool_calls") or []:
                calls.append((c["function"]["name"], json.loads(c["function"]["arguments"])))
            if choice["finish_reason"] is not None:
                finishes.append(choice["finish_reason"])
    assert len(finishes) == 1, finishes  # exactly one chunk carries it
    return {
        "content": content if content or not calls else None,
        "reasoning": reasoning,
        "calls": calls,
        "finish": finishes[0],
    }


def _both(http: httpx.Client, server: Server, output: str, fields: dict[str, Any]) -> dict:
    """The message, non-streaming and streaming at 1 and 4 tokens a step: all agree."""
    results = []
    for per_step in (1, 4):
        body = _body(server, output, per_step, fields)
        results += [_whole(http, server, body), _streamed(http, server, body)]
    assert all(r == results[0] for r in results), results
    return results[0]


def test_a_call_under_none_is_content(http: httpx.Client, server: Server) -> None:
    got = _both(http, server, ANALYSIS + CALL, NONE)
    assert got == {"content": BODY, "reasoning": "Need the weather.", "calls": [], "finish": "stop"}


def test_preamble_and_call_body_under_none_are_content_in_order(
    http: httpx.Client, server: Server
) -> None:
    got = _both(http, server, ANALYSIS + PREAMBLE + CALL, NONE)
    assert got["calls"] == [] and got["finish"] == "stop"
    assert (got["content"], got["reasoning"]) == ("Let me check." + BODY, "Need the weather.")


def test_without_tools_the_call_is_one_to_an_undeclared_tool(
    http: httpx.Client, server: Server
) -> None:
    """No tools and no `none`: harmony still frames the turn, and the call the
    model wrote is returned (docs/tool-calling.md)."""
    got = _both(http, server, ANALYSIS + CALL, {})
    assert got["calls"] == [("get_weather", {"city": "Paris"})]
    assert got["reasoning"] == "Need the weather." and got["finish"] == "tool_calls"


def test_with_active_tools_the_same_turn_is_a_call(http: httpx.Client, server: Server) -> None:
    got = _both(http, server, ANALYSIS + CALL, {"tools": TOOLS})
    assert got == {
        "content": None,
        "reasoning": "Need the weather.",
        "calls": [("get_weather", {"city": "Paris"})],
        "finish": "tool_calls",
    }
