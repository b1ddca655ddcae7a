"""`POST /v1/responses` end to end: a real rotor server (mocker, scripted output)
and the official `openai` SDK, plus raw HTTP where the wire itself matters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from support.models import beam_model
from support.scripts import hermes
from support.server import Server, rotor_server
from support.sse import named_events

MODEL = "mock-model"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
TIME = {
    "type": "function",
    "name": "get_time",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


def items(response: Any) -> list[dict[str, Any]]:
    """Output items without ids (fresh per response)."""
    out = []
    for item in response.output:
        if item.type == "message":
            text = "".join(part.text for part in item.content)
            out.append({"type": "message", "text": text, "status": item.status})
        elif item.type == "reasoning":
            text = "".join(part.text for part in item.content or [])
            out.append({"type": "reasoning", "text": text})
        elif item.type == "function_call":
            args = json.loads(item.arguments)
            out.append({"type": "function_call", "name": item.name, "arguments": args})
        else:  # pragma: no cover - rotor sends no other item
            raise AssertionError(f"unexpected item {item.type}")
    return out


def summary(response: Any) -> tuple[Any, ...]:
    reason = response.incomplete_details.reason if response.incomplete_details else None
    return items(response), response.status, reason, response.usage.output_tokens


def message(text: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "text": text, "status": status}


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": arguments}


# Each case: the scripted model output, extra request fields, expected items.
CASES = {
    "text": ("Hello there, friend!", {}, [message("Hello there, friend!")]),
    "reasoning_then_text": (
        "<think>The user greets me.</think>Hello!",
        {},
        [{"type": "reasoning", "text": "The user greets me."}, message("Hello!")],
    ),
    "one_function_call": (
        hermes("get_weather", {"city": "Paris"}),
        {"tools": [WEATHER]},
        [call("get_weather", {"city": "Paris"})],
    ),
    "several_function_calls": (
        "Checking both."
        + hermes("get_weather", {"city": "Paris"})
        + hermes("get_time", {"zone": "CET"}),
        {"tools": [WEATHER, TIME]},
        [
            message("Checking both."),
            call("get_weather", {"city": "Paris"}),
            call("get_time", {"zone": "CET"}),
        ],
    ),
    # `stop` is rotor's extension (as in chat): the Responses API has none.
    "stop_string": (
        "one two three four",
        {"extra_body": {"stop": ["three"]}},
        [message("one two ")],
    ),
}


def _request(case: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    output, extra, expected = CASES[case]
    extra = dict(extra)
    body = {"mock": {"output": output}, **extra.pop("extra_body", {})}
    return {"model": MODEL, "input": "What is up?", **extra, "extra_body": body}, expected


@pytest.mark.parametrize("case", list(CASES))
def test_create_and_stream_agree(client: openai.OpenAI, case: str) -> None:
    kw, expected = _request(case)
    response = client.responses.create(**kw)
    with client.responses.stream(**kw) as stream:
        streamed = stream.get_final_response()

    assert items(response) == expected
    assert response.status == "completed" and response.incomplete_details is None
    assert response.object == "response" and response.model == MODEL
    assert response.usage.output_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert summary(streamed) == summary(response)
    texts = [i["text"] for i in expected if i["type"] == "message"]
    assert response.output_text == "".join(texts)
    for item in response.output:
        if item.type == "function_call":
            assert item.call_id.startswith("call_") and item.status == "completed"


def test_max_output_tokens_is_incomplete(client: openai.OpenAI) -> None:
    kw = {
        "model": MODEL,
        "input": "What is up?",
        "max_output_tokens": 3,
        "extra_body": {"mock": {"output": "a long answer that will not fit in three tokens"}},
    }
    response = client.responses.create(**kw)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 3
    [item] = items(response)
    assert item["status"] == "incomplete"
    assert "a long answer that will not fit in three tokens".startswith(item["text"])
    # The SDK's final response needs `response.completed`; an incomplete stream
    # ends with `response.incomplete`, which carries the response instead.
    with client.responses.stream(**kw) as stream:
        last = [e for e in stream][-1]
    assert last.type == "response.incomplete"
    assert summary(last.response) == summary(response)


def test_stream_sends_the_responses_event_sequence(server: Server) -> None:
    body = {
        "model": MODEL,
        "input": "What is up?",
        "tools": [WEATHER],
        "stream": True,
        "mock": {
            "output": "<think>hm</think>Sure." + hermes("get_weather", {"city": "Oslo"}),
            "tokens_per_step": 64,
        },
    }
    r = httpx.post(server.v1 + "/responses", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [data for _, data in named_events(r)]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    part = ["response.content_part.added"]
    part_done = ["response.content_part.done", "response.output_item.done"]
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *part,
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        *part_done,
        "response.output_item.added",
        *part,
        "response.output_text.delta",
        "response.output_text.done",
        *part_done,
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    created = events[0]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [
        0,
        1,
        2,
    ]
    done = [e for e in events if e["type"] == "response.output_text.done"][0]
    assert done["text"] == "Sure." and done["item_id"].startswith("msg_")
    args = [e for e in events if e["type"] == "response.function_call_arguments.done"][0]
    assert args["name"] == "get_weather" and json.loads(args["arguments"]) == {"city": "Oslo"}
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert [i["type"] for i in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["output"] == [
        e["item"] for e in events if e["type"] == "response.output_item.done"
    ]
    assert final["usage"]["output_tokens"] > 0


def test_input_items_render_like_the_chat_request(client: openai.OpenAI, server: Server) -> None:
    """function_call → assistant tool_calls, function_call_output → tool message,
    reasoning → the next assistant turn's reasoning, instructions → system."""
    conversation = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Need the tool."}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"},
        {"role": "user", "content": [{"type": "input_text", "text": "Thanks!"}]},
    ]
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "Need the tool.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
        {"role": "user", "content": "Thanks!"},
    ]
    response = client.responses.create(
        model=MODEL,
        instructions="Be brief.",
        input=conversation,
        tools=[WEATHER],
        extra_body={"mock": {"output": "You are welcome."}},
    )
    assert items(response) == [message("You are welcome.")]
    tools = [
        {
            "type": "function",
            "function": {k: WEATHER[k] for k in ("name", "description", "parameters")},
        }
    ]
    assert response.usage.input_tokens == len(server.tokenize(messages=chat, tools=tools))


def test_output_sent_back_as_input_continues_the_conversation(client: openai.OpenAI) -> None:
    """The stateless loop: the client keeps the output items and sends them back."""
    first = client.responses.create(
        model=MODEL,
        input="Weather in Paris?",
        tools=[WEATHER],
        extra_body={
            "mock": {"output": "<think>tool</think>" + hermes("get_weather", {"city": "Paris"})}
        },
    )
    fc = first.output[-1]
    assert fc.type == "function_call"
    second = client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            *first.output,
            {"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"},
        ],
        tools=[WEATHER],
        extra_body={"mock": {"output": "It is sunny."}},
    )
    assert items(second) == [message("It is sunny.")]
    assert second.usage.input_tokens > first.usage.input_tokens


FORCED_ROME = '[{"name": "get_weather", "parameters": {"city": "Rome"}}]'


def test_tool_choice_required_and_named(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input="Weather?",
        tools=[WEATHER, TIME],
        tool_choice="required",
        # The mocker accepts constraints: under `required` the model writes the
        # JSON array the constraint forces, not hermes markup.
        extra_body={"mock": {"output": FORCED_ROME}},
    )
    assert items(response) == [call("get_weather", {"city": "Rome"})]
    response = client.responses.create(
        model=MODEL,
        input="Time?",
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "name": "get_time"},
        extra_body={"mock": {"output": '{"zone": "UTC"}'}},
    )
    assert items(response) == [call("get_time", {"zone": "UTC"})]
    assert response.tool_choice.name == "get_time"


def test_json_schema_format_becomes_guided_json(client: openai.OpenAI) -> None:
    fmt = {
        "type": "json_schema",
        "name": "answer",
        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "strict": True,
    }
    response = client.responses.create(
        model=MODEL,
        input="A number?",
        text={"format": fmt},
        extra_body={"mock": {"output": '{"n": 4}'}},
    )
    assert json.loads(response.output_text) == {"n": 4}
    assert response.text.format.type == "json_schema"
    # An engine that cannot enforce it refuses, naming the field the client sent.
    with rotor_server() as echo:
        plain = echo.openai()
        with pytest.raises(openai.BadRequestError) as e:
            plain.responses.create(model="echo", input="A number?", text={"format": fmt})
        assert e.value.body["param"] == "text.format"
        assert "guided decoding" in e.value.body["message"]


def test_settings_are_echoed(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input=[{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        reasoning={"effort": "low"},
        temperature=0.5,
        top_p=0.9,
        max_output_tokens=40,
        metadata={"k": "v"},
        extra_body={"mock": {"output": "ok"}},
    )
    assert response.reasoning.effort == "low"
    assert (response.temperature, response.top_p, response.max_output_tokens) == (0.5, 0.9, 40)
    assert response.metadata == {"k": "v"}
    assert response.id.startswith("resp_") and response.output[0].id.startswith("msg_")


# -- errors ---------------------------------------------------------------------------------------


def test_bad_requests_raise_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", extra_body={"bogus": 1})
    assert e.value.body["message"] == "unknown field 'bogus'"
    image = {"type": "input_image", "image_url": "data:image/png;base64,AA=="}
    with pytest.raises(
        openai.BadRequestError,
        match=r"input\[0\]\.content\[0\] is an image: the model .mock-model. takes text only",
    ):
        client.responses.create(model=MODEL, input=[{"role": "user", "content": [image]}])
    with pytest.raises(openai.BadRequestError, match="input must not be empty"):
        client.responses.create(model=MODEL, input=[])
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", max_output_tokens=10**6)
    assert e.value.body["param"] == "max_output_tokens"
    with pytest.raises(openai.BadRequestError, match="tools.0.type"):
        client.responses.create(model=MODEL, input="hi", tools=[{"type": "web_search"}])


def test_unknown_model_raises_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model="no-such-model", input="hi")
    assert e.value.body["param"] == "model"


def test_engine_failure(client: openai.OpenAI) -> None:
    body = {"mock": {"output": "partial", "end": "error"}}
    with pytest.raises(openai.InternalServerError, match="internal server error"):
        client.responses.create(model=MODEL, input="hi", extra_body=body)
    events = list(client.responses.create(model=MODEL, input="hi", stream=True, extra_body=body))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2].message == "internal server error"  # no internal text to clients
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.message == "internal server error"
    assert "response.completed" not in [e.type for e in events]


def test_api_key_is_checked() -> None:
    with rotor_server("out=mocker", "--speedup-ratio", "0", "--api-key", "sekrit") as srv:
        wrong = srv.openai(api_key="wrong")
        with pytest.raises(openai.AuthenticationError):
            wrong.responses.create(model=MODEL, input="hi")
        right = srv.openai(api_key="sekrit")
        ok = right.responses.create(model=MODEL, input="hi", extra_body={"mock": {"output": "ok"}})
        assert ok.output_text == "ok"


# -- ids, metrics -------------------------------------------------------------------------------------


def test_request_id_and_metrics(client: openai.OpenAI, server: Server) -> None:
    labels = f'endpoint="responses",model="{MODEL}",status="200",stream="true"'
    plain = f'endpoint="responses",model="{MODEL}",status="200",stream="false"'
    before = server.metric("rotor_requests_total", labels)
    plain_before = server.metric("rotor_requests_total", plain)
    ttft_before = server.metric("rotor_time_to_first_token_seconds_count")
    raw = client.responses.with_raw_response.create(
        model=MODEL,
        input="hi",
        extra_headers={"x-request-id": "responses-rid-1"},
        extra_body={"mock": {"output": "hi"}},
    )
    assert raw.headers["x-request-id"] == "responses-rid-1"
    assert raw.parse().id == "resp_responses-rid-1"
    with client.responses.stream(
        model=MODEL, input="hi", extra_body={"mock": {"output": "hi"}}
    ) as stream:
        stream.get_final_response()
    assert server.metric("rotor_requests_total", labels) == before + 1
    # TTFT is timed for the non-streaming request too.
    assert server.metric("rotor_time_to_first_token_seconds_count") == ttft_before + 2
    assert server.metric("rotor_requests_total", plain) == plain_before + 1


# -- Beam ---------------------------------------------------------------------------------------------

BEAM_HEADER = " to=get_weather<|channel|>analysis <|constrain|>xml<|message|>"
PARIS = '<rfl:parameter name="city">Paris</rfl:parameter>'


@pytest.fixture(scope="module")
def beam_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    path: Path = beam_model(tmp_path_factory.mktemp("beam"))
    args = ("out=mocker", "--model-path", str(path), "--tool-call-parser", "beam")
    with rotor_server(*args, "--speedup-ratio", "0") as srv:
        yield srv.openai()


def test_beam_call_closed_by_eos_is_a_function_call(beam_client: openai.OpenAI) -> None:
    """docs/beam.md B3: a call ended by `<|return|>` under the turn grammar."""
    kw = {
        "model": "beam-model",
        "input": "Weather?",
        "tools": [WEATHER],
        "extra_body": {"mock": {"output": BEAM_HEADER + PARIS, "end": "eos"}},
    }
    response = beam_client.responses.create(**kw)
    with beam_client.responses.stream(**kw) as stream:
        streamed = stream.get_final_response()
    assert items(response) == [call("get_weather", {"city": "Paris"})]
    assert response.status == "completed"
    assert summary(streamed) == summary(response)


def test_beam_malformed_call_at_eos_fails(beam_client: openai.OpenAI) -> None:
    """docs/beam.md B8: a partial parameter at EOS is a request error, never a partial call."""
    kw = {
        "model": "beam-model",
        "input": "Weather?",
        "tools": [WEATHER],
        "extra_body": {
            "mock": {"output": BEAM_HEADER + '<rfl:parameter name="city">Par', "end": "eos"}
        },
    }
    with pytest.raises(openai.InternalServerError, match="malformed tool call"):
        beam_client.responses.create(**kw)
    events = list(beam_client.responses.create(**kw, stream=True))
    assert events[-1].type == "response.failed"
    assert not [e for e in events if e.type == "response.output_item.added"]
