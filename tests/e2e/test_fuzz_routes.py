"""A type-confusion matrix over every field path of every route's request:
no body is a 5xx, and every refusal is a JSON error in the route's envelope
(Anthropic's on /v1/messages, OpenAI's elsewhere). Bounded: one base body per
route, each field path replaced by each value of a small matrix."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.scripts import hermes
from support.server import rotor_server

CONFUSION: list[Any] = [None, True, 0, -1, 2.5, "", "x", [], [1], {}, {"a": 1}, [[]], [{}]]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = hermes("get_weather", {"city": "Paris"})

BASES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "model": "mock-model",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "x"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}},
        "max_tokens": 8,
        "stop": ["zz"],
        "logprobs": True,
        "top_logprobs": 2,
        "n": 2,
        "stream_options": {"include_usage": True},
        "chat_template_kwargs": {"enable_thinking": False},
        "mock": {"output": "Hi" + CALL, "end": "eos"},
    },
    "/v1/completions": {
        "model": "mock-model",
        "prompt": ["hello", "there"],
        "max_tokens": 8,
        "echo": True,
        "logprobs": 1,
        "n": 2,
        "stop": "zz",
        "suffix": None,
        "mock": {"output": ["a", "b"], "end": "eos"},
    },
    "/v1/messages": {
        "model": "mock-model",
        "max_tokens": 8,
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}],
            },
        ],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto"},
        "stop_sequences": ["zz"],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "u"},
    },
    "/v1/messages/count_tokens": {
        "model": "mock-model",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
    },
    "/v1/responses": {
        "model": "mock-model",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "instructions": "be brief",
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"}}},
        "reasoning": {"effort": "low"},
        "max_output_tokens": 8,
    },
    "/tokenize": {
        "model": "mock-model",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": TOOLS,
        "add_generation_prompt": True,
        "chat_template_kwargs": {"enable_thinking": False},
    },
    "/detokenize": {"model": "mock-model", "tokens": [1, 2, 3]},
}
EXTRA: dict[str, list[dict[str, Any]]] = {
    "/tokenize": [{"model": "mock-model", "prompt": "hi", "add_special_tokens": False}],
    "/v1/completions": [{"model": "mock-model", "prompt": [1, 2, 3], "max_tokens": 2}],
}


def paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every field path of a JSON value (keys and list indices), parents first."""
    if at:
        yield at
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from paths(item, (*at, i))


def replaced(value: Any, at: tuple[Any, ...], new: Any) -> Any:
    if not at:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[at[0]] = replaced(value[at[0]], at[1:], new)
    return copy


def bodies() -> Iterator[tuple[str, dict[str, Any]]]:
    for route, base in BASES.items():
        for body in [base, *EXTRA.get(route, [])]:
            yield route, body
            for at in paths(body):
                for value in CONFUSION:
                    yield route, replaced(body, at, value)
                    if isinstance(body, dict) and at[-1] == "messages":
                        break
            yield route, {**body, "stream": True}


def check(route: str, r: httpx.Response) -> str | None:
    """What is wrong with the response; None when it is acceptable."""
    if r.status_code >= 500:
        return f"{r.status_code}: {r.text[:300]}"
    if r.status_code >= 400:
        try:
            body = r.json()
        except ValueError:
            return f"{r.status_code} is not JSON: {r.text[:200]}"
        if route.startswith("/v1/messages"):
            ok = body.get("type") == "error" and isinstance(body["error"].get("message"), str)
        else:
            ok = isinstance(body.get("error"), dict) and isinstance(body["error"]["message"], str)
        if not ok:
            return f"{r.status_code} without the route's envelope: {r.text[:200]}"
    elif r.headers.get("content-type", "").startswith("text/event-stream") and (
        "server_error" in r.text or "api_error" in r.text
    ):
        return f"stream failed inside: {r.text[-300:]}"
    return None


@pytest.mark.timeout(240)
def test_no_body_is_a_server_error() -> None:
    cases = list(bodies())
    assert 500 < len(cases) < 6000  # the matrix stays bounded
    problems = []
    with (
        rotor_server("out=mocker", "--speedup-ratio", "0", "--tool-call-parser", "hermes") as srv,
        httpx.Client(base_url=srv.url, timeout=30) as client,
    ):
        for route, body in cases:
            try:
                problem = check(route, client.post(route, json=body))
            except httpx.TransportError as e:  # a plain-text 500 drops the connection
                problem = f"connection dropped: {e!r}"

            if problem is not None:
                problems.append(f"{route} {body!r:.400}\n  -> {problem}")
        assert client.get("/live").status_code == 200
    assert not problems, f"{len(problems)} of {len(cases)} bodies:\n" + "\n".join(problems[:60])
