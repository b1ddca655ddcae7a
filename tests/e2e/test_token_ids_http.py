"""`return_token_ids` over HTTP with `rotor run out=mocker` (the built-in
model: reasoning qwen3, tool calls hermes): the official openai SDK and raw
SSE, chat and completions, streamed and not, n > 1, a stop string. The ids
are the engine's own: the scripted text's tokenization and the EOS, with the
reasoning tags and tool-call markup the parsers took out of the text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from support.scripts import hermes
from support.server import Server, rotor_server
from support.sse import data_events

MODEL = "mock-model"
USER = [{"role": "user", "content": "Weather in Paris?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
# reasoning, then a tool call: the answer's text holds neither the tags nor the markup
SCRIPT = "<think>It is a weather question.</think>" + hermes("get_weather", {"city": "Paris"})
IDS = {"extra_body": {"return_token_ids": True}}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


@pytest.fixture(scope="module")
def eos(server: Server) -> int:
    """The model's first EOS id, the one the mocker ends a script with."""
    (eos,) = server.tokenize("<|im_end|>")
    return eos


def mock(output: str | list[str], tokens_per_step: int = 1) -> dict[str, Any]:
    return {"output": output, "end": "eos", "tokens_per_step": tokens_per_step}


def post(server: Server, route: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{server.v1}/{route}", json={"model": MODEL, **body}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def stream(server: Server, route: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    body = {"model": MODEL, "stream": True, **body}
    with httpx.stream("POST", f"{server.v1}/{route}", json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        return data_events(r)


# -- chat ---------------------------------------------------------------------------------


def test_chat_returns_the_engine_s_ids_whatever_the_parsers_took(
    server: Server, client: openai.OpenAI, eos: int
) -> None:
    resp = client.chat.completions.create(
        model=MODEL,
        messages=USER,
        tools=TOOLS,  # type: ignore[arg-type]
        extra_body={"return_token_ids": True, "mock": mock(SCRIPT)},
    )
    body = resp.to_dict()
    assert body["prompt_token_ids"] == server.tokenize(messages=USER, tools=TOOLS)
    (choice,) = resp.choices
    message = choice.message
    assert message.model_extra is not None
    assert message.model_extra["reasoning_content"] == "It is a weather question."
    assert message.tool_calls is not None and message.tool_calls[0].function.name == "get_weather"
    assert choice.finish_reason == "tool_calls"
    assert choice.model_extra is not None
    assert choice.model_extra["token_ids"] == [*server.tokenize(SCRIPT), eos]
    assert resp.usage is not None
    assert resp.usage.completion_tokens == len(choice.model_extra["token_ids"])


@pytest.mark.parametrize("per_step", [1, 3])
def test_chat_streamed_ids_are_the_non_streamed_ones_chunk_by_chunk(
    server: Server, per_step: int
) -> None:
    body = {
        "messages": USER,
        "tools": TOOLS,
        "return_token_ids": True,
        "mock": mock(SCRIPT, per_step),
    }
    whole = post(server, "chat/completions", body)
    chunks = stream(server, "chat/completions", body)
    opening, rest = chunks[0], chunks[1:]
    # the prompt's ids ride on the opening chunk, at its root, as vLLM's do
    assert opening["prompt_token_ids"] == whole["prompt_token_ids"]
    assert "token_ids" not in opening["choices"][0]
    assert all("prompt_token_ids" not in c for c in rest)
    # every later choice chunk carries its own ids; together they are the answer's
    assert all("token_ids" in c["choices"][0] for c in rest)
    streamed = [t for c in rest for t in c["choices"][0]["token_ids"]]
    assert streamed == whole["choices"][0]["token_ids"]
    calls = [tc for c in rest for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert [tc["function"]["name"] for tc in calls] == ["get_weather"]


def test_chat_n_choices_each_have_their_own_ids(server: Server, eos: int) -> None:
    outputs = ["First answer.", "<think>hm</think>Second, longer answer."]
    body = {"messages": USER, "n": 2, "return_token_ids": True, "mock": mock(outputs, 2)}
    whole = post(server, "chat/completions", body)
    expected = [[*server.tokenize(o), eos] for o in outputs]
    assert [c["token_ids"] for c in whole["choices"]] == expected
    assert whole["prompt_token_ids"] == server.tokenize(messages=USER)
    chunks = stream(server, "chat/completions", body)
    openings = [c for c in chunks if "role" in c["choices"][0]["delta"]]
    assert sorted(c["choices"][0]["index"] for c in openings) == [0, 1]
    assert all(c["prompt_token_ids"] == whole["prompt_token_ids"] for c in openings)
    streamed: dict[int, list[int]] = {0: [], 1: []}
    for c in chunks:
        if c not in openings:
            streamed[c["choices"][0]["index"]] += c["choices"][0]["token_ids"]
    assert [streamed[0], streamed[1]] == expected


def test_a_stop_string_keeps_the_ids_through_the_one_that_completed_it(server: Server) -> None:
    """vLLM's rule: the token that completed the stop string is returned
    (its text is cut); the ones after it are not, even in the same step."""
    text = "alpha beta STOP gamma delta epsilon"
    ids = server.tokenize(text)
    k = next(k for k in range(1, len(ids) + 1) if "STOP" in server.detokenize(ids[:k]))
    body = {"messages": USER, "stop": ["STOP"], "return_token_ids": True, "mock": mock(text, 4)}
    (choice,) = post(server, "chat/completions", body)["choices"]
    assert choice["message"]["content"] == "alpha beta "
    assert choice["stop_reason"] == "STOP"
    assert choice["token_ids"] == ids[:k]
    chunks = stream(server, "chat/completions", body)[1:]
    assert [t for c in chunks for t in c["choices"][0]["token_ids"]] == ids[:k]


def test_without_the_field_nothing_is_added(server: Server) -> None:
    for flag in ({}, {"return_token_ids": False}):
        body = {"messages": USER, "n": 2, "mock": mock("Plain."), **flag}
        whole = post(server, "chat/completions", body)
        assert "prompt_token_ids" not in whole
        assert all("token_ids" not in c for c in whole["choices"])
        with httpx.stream(
            "POST",
            f"{server.v1}/chat/completions",
            json={"model": MODEL, "stream": True, **body},
            timeout=30,
        ) as r:
            assert b"token_ids" not in r.read()
        done = post(server, "completions", {"prompt": "x", "mock": mock("Plain."), **flag})
        assert all("token_ids" not in c and "prompt_token_ids" not in c for c in done["choices"])


# -- completions --------------------------------------------------------------------------


def test_completions_carry_ids_per_choice_each_with_its_prompt(
    server: Server, client: openai.OpenAI, eos: int
) -> None:
    prompts = ["The weather in Paris", "Two plus two"]
    outputs = ["is mild.", "is four."]
    resp = client.completions.create(
        model=MODEL,
        prompt=prompts,
        n=2,
        max_tokens=20,
        extra_body={"return_token_ids": True, "mock": mock(outputs)},
    )
    choices = [c.to_dict() for c in resp.choices]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    assert [c["prompt_token_ids"] for c in choices] == [
        server.tokenize(p) for p in prompts for _ in range(2)
    ]
    assert [c["token_ids"] for c in choices] == [[*server.tokenize(o), eos] for o in outputs] * 2


def test_completions_streamed_ids_are_the_non_streamed_ones(server: Server) -> None:
    body = {"prompt": ["one", "two"], "n": 2, "return_token_ids": True}
    body["mock"] = mock(["Fine words, all of them.", "Another answer here."], 2)
    whole = post(server, "completions", body)["choices"]
    chunks = stream(server, "completions", body)
    streamed: dict[int, list[int]] = {i: [] for i in range(4)}
    prompt_ids: dict[int, list[list[int]]] = {i: [] for i in range(4)}
    for chunk in chunks:
        (c,) = chunk["choices"]
        streamed[c["index"]] += c["token_ids"]
        if "prompt_token_ids" in c:
            prompt_ids[c["index"]].append(c["prompt_token_ids"])
    for i in range(4):
        assert streamed[i] == whole[i]["token_ids"]
        # on each choice's first chunk only
        assert prompt_ids[i] == [whole[i]["prompt_token_ids"]]
        first = next(ch["choices"][0] for ch in chunks if ch["choices"][0]["index"] == i)
        assert "prompt_token_ids" in first


def test_completions_echo_keeps_its_text_and_the_ids_stay_the_answer_s(
    server: Server, eos: int
) -> None:
    body = {"prompt": "Say:", "echo": True, "return_token_ids": True, "mock": mock(" hi")}
    (choice,) = post(server, "completions", body)["choices"]
    assert choice["text"] == "Say: hi"
    assert choice["prompt_token_ids"] == server.tokenize("Say:")
    assert choice["token_ids"] == [*server.tokenize(" hi"), eos]
