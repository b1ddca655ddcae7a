"""The app in process (httpx's ASGI transport): body limits on every JSON
route, and 400s whose `param` names the field at fault."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from rotor.engines.echo import EchoEngine
from rotor.model.builtin import builtin_test_model

from support.app import app_over

LIMIT = 300  # bytes: the app's body limit here
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    card, tok = builtin_test_model()
    async with app_over(EchoEngine(card, tok, 0), body_limit=LIMIT) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rotor") as http:
            yield http


# -- body limits ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "small", "large"),
    [
        ("/tokenize", {"prompt": "x" * 10}, {"prompt": "x" * (2 * LIMIT)}),
        (
            "/tokenize",
            {"messages": MESSAGES},
            {"messages": [{"role": "user", "content": "x" * LIMIT}]},
        ),
        ("/detokenize", {"tokens": [1, 2]}, {"tokens": [1] * LIMIT}),
    ],
)
async def test_token_routes_keep_the_body_limit(
    client: httpx.AsyncClient, path: str, small: dict[str, Any], large: dict[str, Any]
) -> None:
    assert (await client.post(path, json=small)).status_code == 200
    r = await client.post(path, json=large)
    assert r.status_code == 413, r.text
    assert str(LIMIT) in r.json()["error"]["message"]


async def test_token_routes_still_refuse_what_is_not_a_json_object(
    client: httpx.AsyncClient,
) -> None:
    for path in ("/tokenize", "/detokenize"):
        r = await client.post(path, content=b"[1, 2]")
        assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
        r = await client.post(path, content=b"{not json")
        assert r.status_code == 400 and "malformed JSON" in r.json()["error"]["message"]


# -- 400s name their field --------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"stream_options": {"include_usage": True}}, "stream_options"),
        ("/v1/chat/completions", {"top_logprobs": 3}, "top_logprobs"),
        ("/v1/chat/completions", {"guided_json": {}, "guided_regex": "a+"}, "guided_json"),
        ("/v1/chat/completions", {"guided_regex": "a+", "guided_choice": ["a"]}, "guided_json"),
        (
            "/v1/chat/completions",
            {"structured_outputs": {"regex": "a+"}, "guided_regex": "a+"},
            "structured_outputs",
        ),
        (
            "/v1/chat/completions",
            {"structured_outputs": {"regex": "a+"}, "response_format": {"type": "json_object"}},
            "structured_outputs",
        ),
        (
            "/v1/completions",
            {"structured_outputs": {"json": {}}, "guided_json": {}},
            "structured_outputs",
        ),
        ("/v1/completions", {"stream_options": {"include_usage": True}}, "stream_options"),
        ("/v1/completions", {"max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"prompt_logprobs": 21}, "prompt_logprobs"),
        ("/v1/completions", {"prompt_logprobs": -1}, "prompt_logprobs"),
        ("/v1/completions", {"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
        ("/v1/chat/completions", {"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
        ("/v1/chat/completions", {"max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"suffix": "end"}, "suffix"),
        ("/v1/completions", {"best_of": 2}, "best_of"),
    ],
)
async def test_cross_field_checks_name_their_field(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], param: str
) -> None:
    base = {"messages": MESSAGES} if "chat" in path else {"prompt": "hi"}
    r = await client.post(path, json={**base, **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param
    assert param in error["message"]


@pytest.mark.parametrize(
    ("so", "param", "names"),
    [
        ({"regex": "a", "choice": ["a"]}, "structured_outputs", ["regex", "choice"]),
        ({"whitespace_pattern": " "}, "structured_outputs", ["none"]),
        ({"json": {"type": 5}}, "structured_outputs.json", ["not valid JSON Schema"]),
        ({"regex": "a", "guided_regex": "a"}, "structured_outputs.guided_regex", []),
        ({"json_object": False}, "structured_outputs.json_object", ["true"]),
        ({"structural_tag": "not json"}, "structured_outputs.structural_tag", ["JSON object"]),
    ],
)
async def test_structured_outputs_takes_exactly_one_known_kind(
    client: httpx.AsyncClient, so: dict[str, Any], param: str, names: list[str]
) -> None:
    for path, base in (
        ("/v1/chat/completions", {"messages": MESSAGES}),
        ("/v1/completions", {"prompt": "hi"}),
    ):
        r = await client.post(path, json={**base, "structured_outputs": so})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == param, error
        assert all(n in error["message"] for n in names), error


@pytest.mark.parametrize("parameters", ["an object, honest", [1, 2], 7])
async def test_tool_parameters_that_are_not_an_object_are_a_400(
    client: httpx.AsyncClient, parameters: Any
) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": parameters}}]
    for path, extra in (("/v1/chat/completions", {"max_tokens": 5}), ("/tokenize", {})):
        r = await client.post(path, json={"messages": MESSAGES, "tools": tools, **extra})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == "tools"
        assert "tools[0].function.parameters" in error["message"]


async def test_tools_without_parameters_are_fine(client: httpx.AsyncClient) -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    r = await client.post(
        "/v1/chat/completions", json={"messages": MESSAGES, "tools": tools, "max_tokens": 5}
    )
    assert r.status_code == 200, r.text


async def test_anthropic_stop_sequences_are_checked_like_chats(client: httpx.AsyncClient) -> None:
    body = {"max_tokens": 5, "messages": MESSAGES, "stop_sequences": ["a", ""]}
    r = await client.post("/v1/messages", json=body)
    assert r.status_code == 400
    assert "stop sequences must not be empty" in r.json()["error"]["message"]
