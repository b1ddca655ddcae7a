"""Strict request types over real HTTP: what the OpenAI API refuses rather than
coerces (a string for a number, 0 for a boolean, booleans as token ids, a
body not declared as JSON, a tool schema that is not JSON Schema) is a 400
naming the field, in the route's own envelope."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.server import Server, rotor_server

MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = {"model": "echo", "messages": MESSAGES}
BAD_SCHEMA = {"type": "object", "properties": {"a": {"type": 5}}, "required": "a"}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server() as srv:
        yield srv


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {**CHAT, "max_tokens": "5"}, "max_tokens"),
        ("/v1/chat/completions", {**CHAT, "stream": 0}, "stream"),
        ("/v1/chat/completions", {**CHAT, "logprobs": "yes"}, "logprobs"),
        ("/v1/chat/completions", {**CHAT, "return_token_ids": "yes"}, "return_token_ids"),
        ("/v1/chat/completions", {**CHAT, "prompt_logprobs": "2"}, "prompt_logprobs"),
        (
            "/v1/completions",
            {"model": "echo", "prompt": "x", "prompt_logprobs": 1.0},
            "prompt_logprobs",
        ),
        (
            "/v1/completions",
            {"model": "echo", "prompt": "x", "return_token_ids": 1},
            "return_token_ids",
        ),
        ("/v1/chat/completions", {**CHAT, "temperature": "0.5"}, "temperature"),
        ("/v1/chat/completions", {**CHAT, "priority": "5"}, "priority"),
        ("/v1/completions", {"model": "echo", "prompt": "x", "priority": 1.5}, "priority"),
        ("/v1/chat/completions", {**CHAT, "n": 1.0}, "n"),
        ("/v1/chat/completions", {**CHAT, "stop_token_ids": [True]}, "stop_token_ids"),
        ("/v1/completions", {"model": "echo", "prompt": [True, False]}, "prompt"),
        ("/v1/completions", {"model": "echo", "prompt": "x", "max_tokens": "5"}, "max_tokens"),
        ("/v1/completions", {"model": "echo", "prompt": "x", "logprobs": True}, "logprobs"),
        # cache_salt: a string, non-empty, at most 128 characters, none of vLLM's forbidden
        ("/v1/chat/completions", {**CHAT, "cache_salt": 7}, "cache_salt"),
        ("/v1/chat/completions", {**CHAT, "cache_salt": ""}, "cache_salt"),
        ("/v1/chat/completions", {**CHAT, "cache_salt": "a" * 129}, "cache_salt"),
        ("/v1/chat/completions", {**CHAT, "cache_salt": "tenant/a"}, "cache_salt"),
        ("/v1/completions", {"model": "echo", "prompt": "x", "cache_salt": ""}, "cache_salt"),
        ("/v1/completions", {"model": "echo", "prompt": "x", "cache_salt": ["a"]}, "cache_salt"),
        (
            "/v1/chat/completions",
            {
                **CHAT,
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": BAD_SCHEMA}}
                ],
            },
            "tools",
        ),
        ("/v1/chat/completions", {**CHAT, "guided_json": {"type": 5}}, "guided_json"),
        (
            "/v1/chat/completions",
            {**CHAT, "structured_outputs": {"json": {"type": 5}}},
            "structured_outputs.json",
        ),
        (
            "/v1/chat/completions",
            {**CHAT, "structured_outputs": {"regex": 5}},
            "structured_outputs",
        ),
        (
            "/v1/completions",
            {"model": "echo", "prompt": "x", "structured_outputs": {"choice": "a"}},
            "structured_outputs",
        ),
        (
            "/v1/chat/completions",
            {**CHAT, "structured_outputs": {"json_object": "true"}},
            "structured_outputs",
        ),
        (
            "/v1/chat/completions",
            {
                **CHAT,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"required": "a"}},
                },
            },
            "response_format",
        ),
        ("/v1/responses", {"model": "echo", "input": "hi", "stream": 1}, "stream"),
        (
            "/v1/responses",
            {
                "model": "echo",
                "input": "hi",
                "tools": [{"type": "function", "name": "f", "parameters": BAD_SCHEMA}],
            },
            "tools",
        ),
    ],
)
def test_openai_routes_refuse_coercible_values(
    server: Server, path: str, body: dict[str, Any], param: str
) -> None:
    r = httpx.post(server.url + path, json=body, timeout=10)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] is not None and error["param"].startswith(param), error
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "body",
    [
        {"model": "echo", "max_tokens": "5", "messages": MESSAGES},
        {"model": "echo", "max_tokens": 5, "messages": MESSAGES, "stream": 0},
        {
            "model": "echo",
            "max_tokens": 5,
            "messages": MESSAGES,
            "tools": [{"name": "f", "input_schema": BAD_SCHEMA}],
        },
    ],
)
def test_anthropic_route_refuses_coercible_values(server: Server, body: dict[str, Any]) -> None:
    r = httpx.post(server.url + "/v1/messages", json=body, timeout=10)
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_detokenize_refuses_booleans_as_token_ids() -> None:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as mocker:
        url = mocker.url + "/detokenize"
        assert httpx.post(url, json={"tokens": [1, 0]}, timeout=10).status_code == 200
        r = httpx.post(url, json={"tokens": [True, False]}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tokens", r.text


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "text/json"]
)
def test_a_body_not_declared_as_json_is_refused(server: Server, content_type: str) -> None:
    r = httpx.post(
        server.v1 + "/chat/completions",
        content=b'{"model": "echo", "messages": [{"role": "user", "content": "hi"}]}',
        headers={"content-type": content_type},
        timeout=10,
    )
    assert r.status_code == 400, r.text
    assert "application/json" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "content_type", [None, "application/json", "application/json; charset=utf-8"]
)
def test_a_json_body_is_read(server: Server, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    r = httpx.post(
        server.v1 + "/chat/completions",
        content=b'{"model": "echo", "messages": [{"role": "user", "content": "hi"}]}',
        headers=headers,
        timeout=10,
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "hi"


def test_integral_floats_and_ints_for_float_fields_are_accepted(server: Server) -> None:
    r = httpx.post(
        server.v1 + "/chat/completions",
        json={**CHAT, "temperature": 1, "top_p": 1, "presence_penalty": 0},
        timeout=10,
    )
    assert r.status_code == 200, r.text
