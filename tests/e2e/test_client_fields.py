"""The fields real clients send, through the official openai SDK against a
real `rotor run out=mocker`: every field of OpenAI's reference (and vLLM's
extensions) is implemented or accepted and ignored, never a 400; a field no
API knows is a 400 naming it. Also the mocker's honesty under constraints:
readable random text, a value for the schema, one of the choices, a call of
the forced tool."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from support.server import Server, rotor_server

MODEL = "mock-model"
MESSAGES = [{"role": "user", "content": "Hello there"}]
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"],
}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


# Each row: a field as the SDK sends it (typed parameters where the SDK has
# them, extra_body for vLLM's extensions), accepted with a 200.
CHAT_FIELDS: list[tuple[str, dict[str, Any]]] = [
    ("logit_bias", {"logit_bias": {"5": -100}}),
    ("service_tier", {"service_tier": "auto"}),
    ("prompt_cache_key", {"prompt_cache_key": "k1"}),
    ("safety_identifier", {"safety_identifier": "u-1"}),
    ("user", {"user": "u-1"}),
    ("metadata", {"metadata": {"k": "v"}, "store": False}),
    ("modalities", {"modalities": ["text"]}),
    ("verbosity", {"verbosity": "low"}),
    ("prediction", {"prediction": {"type": "content", "content": "Hi"}}),
    ("reasoning_effort", {"reasoning_effort": "low"}),
    ("seed", {"seed": 3}),
    ("parallel_tool_calls", {"parallel_tool_calls": False}),
    ("priority", {"extra_body": {"priority": 0}}),  # nonzero: tests/e2e/test_priority.py
    ("spaces_between_special_tokens", {"extra_body": {"spaces_between_special_tokens": True}}),
    ("documents", {"extra_body": {"documents": [{"title": "t", "text": "x"}]}}),
    ("chat_template_kwargs", {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}),
    ("truncate_prompt_tokens", {"extra_body": {"truncate_prompt_tokens": 100}}),
    ("add_special_tokens", {"extra_body": {"add_special_tokens": False}}),
    ("use_beam_search", {"extra_body": {"use_beam_search": False}}),
    ("echo", {"extra_body": {"echo": False}}),
    ("return_tokens_as_token_ids", {"extra_body": {"return_tokens_as_token_ids": False}}),
]

COMPLETION_FIELDS: list[tuple[str, dict[str, Any]]] = [
    ("logit_bias", {"logit_bias": {"5": -100}}),
    ("best_of", {"best_of": 1}),
    ("user", {"user": "u-1"}),
    ("echo", {"echo": True}),
    ("service_tier", {"extra_body": {"service_tier": "auto"}}),
    ("priority", {"extra_body": {"priority": 0}}),  # nonzero: tests/e2e/test_priority.py
    ("prompt_cache_key", {"extra_body": {"prompt_cache_key": "k"}}),
]


@pytest.mark.parametrize(("field", "kw"), CHAT_FIELDS, ids=[f for f, _ in CHAT_FIELDS])
def test_chat_accepts_what_clients_send(client: openai.OpenAI, field: str, kw: dict) -> None:
    resp = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, **kw)
    assert resp.choices[0].message.role == "assistant"
    assert resp.usage is not None and resp.usage.completion_tokens >= 1


@pytest.mark.parametrize(("field", "kw"), COMPLETION_FIELDS, ids=[f for f, _ in COMPLETION_FIELDS])
def test_completions_accept_what_clients_send(client: openai.OpenAI, field: str, kw: dict) -> None:
    resp = client.completions.create(model=MODEL, prompt="Hello", max_tokens=4, **kw)
    assert resp.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("name", ["max_tokenz", "temprature", "logit_biass"])
def test_a_field_no_api_knows_is_a_400_naming_it(client: openai.OpenAI, name: str) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=4, extra_body={name: 1}
        )
    assert name in str(e.value)


def test_modalities_asking_for_audio_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="modalities"):
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=4, modalities=["text", "audio"]
        )


# -- implemented fields -----------------------------------------------------------------


def test_logit_bias_reaches_the_engine(client: openai.OpenAI, server: Server) -> None:
    token = server.tokenize("river")[0]
    piece = server.detokenize([token])
    forced = client.completions.create(
        model=MODEL, prompt="Hello", max_tokens=6, logit_bias={str(token): 100}, seed=1
    )
    assert forced.choices[0].text == piece * 6
    plain = client.completions.create(model=MODEL, prompt="Hello", max_tokens=6, seed=1)
    assert plain.choices[0].text != forced.choices[0].text


def test_logit_bias_out_of_range_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        client.completions.create(model=MODEL, prompt="x", max_tokens=2, logit_bias={"9999999": 5})
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        client.completions.create(model=MODEL, prompt="x", max_tokens=2, logit_bias={"5": 500})


def test_legacy_functions_become_tools(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        functions=[{"name": "get_weather", "parameters": WEATHER}],
        function_call={"name": "get_weather"},
        extra_body={"mock": {"output": '{"city": "Paris"}'}},
    )
    (call,) = resp.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_completions_echo_returns_the_prompt(client: openai.OpenAI, server: Server) -> None:
    ids = server.tokenize("Once upon")
    for prompt, text in (("Once upon", "Once upon"), (ids, "Once upon")):
        resp = client.completions.create(
            model=MODEL,
            prompt=prompt,
            echo=True,
            max_tokens=20,
            extra_body={"mock": {"output": " a time"}},
        )
        assert resp.choices[0].text == text + " a time"
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt=["A", "B"],
            n=2,
            echo=True,
            max_tokens=3,
            stream=True,
            extra_body={"mock": {"output": "!"}},
        )
    )
    texts = {i: "" for i in range(4)}
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.text
    assert texts == {0: "A!", 1: "A!", 2: "B!", 3: "B!"}


def test_request_chat_template_is_used_and_sandboxed(client: openai.OpenAI, server: Server) -> None:
    template = "{% for m in messages %}[{{ m.content }}]{% endfor %}"
    resp = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=2, extra_body={"chat_template": template}
    )
    assert resp.usage.prompt_tokens == len(server.tokenize("[Hello there]"))
    for bad in ("{{ ''.__class__.__mro__ }}", "{% for %}"):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_tokens=2, extra_body={"chat_template": bad}
            )
        assert e.value.body["param"] == "chat_template"


# -- the mocker under constraints ---------------------------------------------------------


def test_random_text_is_readable(client: openai.OpenAI) -> None:
    for seed in range(5):
        text = (
            client.completions.create(model=MODEL, prompt="Hi", max_tokens=40, seed=seed)
            .choices[0]
            .text
        )
        assert "\ufffd" not in text and text.isprintable(), repr(text)


def test_guided_json_gets_a_value_for_the_schema(client: openai.OpenAI) -> None:
    for seed in range(3):
        resp = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, seed=seed, extra_body={"guided_json": WEATHER}
        )
        jsonschema.validate(json.loads(resp.choices[0].message.content), WEATHER)
        assert resp.choices[0].finish_reason == "stop"
    resp = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER}},
    )
    jsonschema.validate(json.loads(resp.choices[0].message.content), WEATHER)


def test_guided_choice_gets_one_of_the_choices(client: openai.OpenAI) -> None:
    choices = ["yes", "no", "maybe so"]
    got = {
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, seed=s, extra_body={"guided_choice": choices}
        )
        .choices[0]
        .message.content
        for s in range(6)
    }
    assert got <= set(choices) and got


def test_guided_regex_is_refused_not_ignored(server: Server) -> None:
    r = httpx.post(
        server.v1 + "/chat/completions",
        json={"model": MODEL, "messages": MESSAGES, "guided_regex": "[a-z]+"},
        timeout=10,
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "guided_regex", r.text


def test_structured_outputs_json_and_choice_get_values_they_admit(client: openai.OpenAI) -> None:
    """vLLM >= 0.12 clients' spelling, answered as its guided_* twin is."""
    for seed in range(3):
        so = {"json": WEATHER, "disable_any_whitespace": True}
        resp = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, seed=seed, extra_body={"structured_outputs": so}
        )
        content = resp.choices[0].message.content or ""
        jsonschema.validate(json.loads(content), WEATHER)
        assert not any(c.isspace() for c in content if c not in '"')  # compact JSON
        guided = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, seed=seed, extra_body={"guided_json": WEATHER}
        )
        assert guided.choices[0].message.content == content  # one constraint, two spellings
    obj = client.completions.create(
        model=MODEL, prompt="Hi", extra_body={"structured_outputs": {"json_object": True}}
    )
    assert isinstance(json.loads(obj.choices[0].text), dict)
    choices = ["yes", "no", "maybe so"]
    got = {
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            seed=s,
            extra_body={"structured_outputs": {"choice": choices}},
        )
        .choices[0]
        .message.content
        for s in range(6)
    }
    assert got <= set(choices) and got


@pytest.mark.parametrize(
    ("so", "param"),
    [
        ({"regex": "[a-z]+"}, "structured_outputs.regex"),
        ({"grammar": 'root ::= "a"'}, "structured_outputs.grammar"),
        (
            {"structural_tag": '{"type": "structural_tag", "format": {"type": "any_text"}}'},
            "structured_outputs.structural_tag",
        ),
        ({"json": WEATHER, "whitespace_pattern": " *"}, "structured_outputs.whitespace_pattern"),
    ],
)
def test_structured_outputs_the_mocker_cannot_satisfy_are_refused(
    client: openai.OpenAI, so: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, extra_body={"structured_outputs": so}
        )
    error = e.value.body
    assert isinstance(error, dict) and error["param"] == param, error
    assert param in error["message"], error


def test_structured_outputs_with_its_twin_is_a_400_naming_both(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            response_format={"type": "json_object"},
            extra_body={"structured_outputs": {"choice": ["a"]}},
        )
    error = e.value.body
    assert isinstance(error, dict) and error["param"] == "structured_outputs", error
    assert "response_format" in error["message"], error


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_choice_gets_a_call_of_that_tool(client: openai.OpenAI, stream: bool) -> None:
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
        {"type": "function", "function": {"name": "other"}},
    ]
    kw: dict[str, Any] = dict(
        model=MODEL,
        messages=MESSAGES,
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    if stream:
        calls = [
            tc
            for chunk in client.chat.completions.create(stream=True, **kw)
            for ch in chunk.choices
            for tc in ch.delta.tool_calls or []
        ]
    else:
        calls = client.chat.completions.create(**kw).choices[0].message.tool_calls
    (call,) = calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)


def test_required_tool_choice_gets_a_call(client: openai.OpenAI) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    resp = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=tools, tool_choice="required", seed=2
    )
    calls = resp.choices[0].message.tool_calls
    assert calls and all(c.function.name == "get_weather" for c in calls)
    assert resp.choices[0].finish_reason == "tool_calls"


def test_logprob_bytes_are_each_tokens_own(client: openai.OpenAI, server: Server) -> None:
    text = "naïve 東京 ☕"
    ids = server.tokenize(text)
    assert len(ids) > len(text.split())  # some tokens hold part of a character
    resp = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        logprobs=True,
        top_logprobs=2,
        extra_body={"mock": {"output": text, "end": "stop"}},
    )
    entries = resp.choices[0].logprobs.content
    assert b"".join(bytes(e.bytes) for e in entries) == text.encode()
    assert all(bytes(e.bytes) != "\ufffd".encode() for e in entries)
