"""`POST /v1/messages` end to end: a real rotor server (mocker, scripted output)
and the official `anthropic` SDK, plus raw HTTP where the wire itself matters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from support.models import beam_model
from support.scripts import hermes
from support.server import Server, rotor_server
from support.sse import named_events
from support.wait import wait_for

MODEL = "mock-model"
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
TIME = {
    "name": "get_time",
    "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> anthropic.Anthropic:
    return server.anthropic()


def ask(text: str = "What is up?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def blocks(message: Any) -> list[dict[str, Any]]:
    """Content blocks without tool ids (they are fresh per response)."""
    out = []
    for b in message.content:
        if b.type == "text":
            out.append({"type": "text", "text": b.text})
        elif b.type == "thinking":
            out.append({"type": "thinking", "thinking": b.thinking})
        elif b.type == "tool_use":
            out.append({"type": "tool_use", "name": b.name, "input": b.input})
        else:  # pragma: no cover - rotor sends no other block
            raise AssertionError(f"unexpected block {b.type}")
    return out


def summary(message: Any) -> tuple[Any, ...]:
    return blocks(message), message.stop_reason, message.stop_sequence, message.usage.output_tokens


# Each case: the scripted model output, extra request fields, expected blocks,
# stop_reason, stop_sequence.
CASES = {
    "text": (
        "Hello there, friend!",
        {},
        [{"type": "text", "text": "Hello there, friend!"}],
        "end_turn",
        None,
    ),
    "thinking_then_text": (
        "<think>The user greets me.</think>Hello!",
        {},
        [
            {"type": "thinking", "thinking": "The user greets me."},
            {"type": "text", "text": "Hello!"},
        ],
        "end_turn",
        None,
    ),
    "one_tool_call": (
        hermes("get_weather", {"city": "Paris"}),
        {"tools": [WEATHER]},
        [{"type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}}],
        "tool_use",
        None,
    ),
    "several_tool_calls": (
        "Checking both."
        + hermes("get_weather", {"city": "Paris"})
        + hermes("get_time", {"zone": "CET"}),
        {"tools": [WEATHER, TIME]},
        [
            {"type": "text", "text": "Checking both."},
            {"type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "name": "get_time", "input": {"zone": "CET"}},
        ],
        "tool_use",
        None,
    ),
    "stop_sequence": (
        "one two three four",
        {"stop_sequences": ["three"]},
        [{"type": "text", "text": "one two "}],
        "stop_sequence",
        "three",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_create_and_stream_agree(client: anthropic.Anthropic, case: str) -> None:
    output, extra, expected, stop_reason, stop_sequence = CASES[case]
    kw = {"model": MODEL, "max_tokens": 200, "messages": ask(), **extra}
    body = {"mock": {"output": output}}

    message = client.messages.create(**kw, extra_body=body)
    with client.messages.stream(**kw, extra_body=body) as stream:
        streamed = stream.get_final_message()

    assert blocks(message) == expected
    assert message.stop_reason == stop_reason
    assert message.stop_sequence == stop_sequence
    assert message.role == "assistant" and message.type == "message"
    assert message.model == MODEL
    assert message.usage.output_tokens > 0
    assert summary(streamed) == summary(message)
    for b in message.content:
        if b.type == "tool_use":
            assert b.id.startswith("toolu_") and len(b.id) == len("toolu_") + 24


def test_max_tokens_ends_with_max_tokens(client: anthropic.Anthropic) -> None:
    kw = {"model": MODEL, "max_tokens": 3, "messages": ask()}
    body = {"mock": {"output": "a long answer that will not fit in three tokens"}}
    message = client.messages.create(**kw, extra_body=body)
    with client.messages.stream(**kw, extra_body=body) as stream:
        streamed = stream.get_final_message()
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 3
    text = message.content[0].text
    assert text and "a long answer that will not fit in three tokens".startswith(text)
    assert summary(streamed) == summary(message)


def test_stream_sends_anthropics_event_sequence(server: Server) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 200,
        "messages": ask(),
        "tools": [WEATHER],
        "stream": True,
        "mock": {
            "output": "<think>hm</think>Sure." + hermes("get_weather", {"city": "Oslo"}),
            "tokens_per_step": 64,
        },
    }
    r = httpx.post(server.v1 + "/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = named_events(r)
    kinds = [k for k, _ in events if k != "ping"]
    block = ["content_block_start", "content_block_delta", "content_block_stop"]
    assert kinds == ["message_start", *block * 3, "message_delta", "message_stop"]
    assert events[1][0] == "ping"
    data = [d for k, d in events if k != "ping"]
    start = data[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] > 0
    assert [d["content_block"]["type"] for d in data if d["type"] == "content_block_start"] == [
        "thinking",
        "text",
        "tool_use",
    ]
    assert [d["delta"]["type"] for d in data if d["type"] == "content_block_delta"] == [
        "thinking_delta",
        "text_delta",
        "input_json_delta",
    ]
    assert [d["index"] for d in data if d["type"] == "content_block_stop"] == [0, 1, 2]
    tool = [d for d in data if d["type"] == "content_block_start"][2]["content_block"]
    assert tool["input"] == {} and tool["name"] == "get_weather"
    json_delta = [d for d in data if d["type"] == "content_block_delta"][2]["delta"]
    assert orjson.loads(json_delta["partial_json"]) == {"city": "Oslo"}
    end = data[-2]
    assert end["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert end["usage"]["output_tokens"] > 0


def test_tool_round_trip_renders_like_the_chat_request(
    client: anthropic.Anthropic, server: Server
) -> None:
    """tool_use → assistant tool_calls, tool_result → tool message, thinking →
    reasoning: the prompt is the one the equivalent chat messages render."""
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Need the tool.", "signature": ""},
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21 C"},
                {"type": "text", "text": "Thanks!"},
            ],
        },
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
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny, 21 C"},
        {"role": "user", "content": "Thanks!"},
    ]
    counted = client.messages.count_tokens(
        model=MODEL, system="Be brief.", messages=messages, tools=[WEATHER]
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": WEATHER["name"],
                "description": WEATHER["description"],
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    assert counted.input_tokens == len(server.tokenize(messages=chat, tools=tools))

    reply = client.messages.create(
        model=MODEL,
        max_tokens=50,
        system="Be brief.",
        messages=messages,
        tools=[WEATHER],
        extra_body={"mock": {"output": "You are welcome."}},
    )
    assert blocks(reply) == [{"type": "text", "text": "You are welcome."}]
    assert reply.usage.input_tokens + reply.usage.cache_read_input_tokens == counted.input_tokens


def test_system_blocks_and_text_blocks_count_like_strings(client: anthropic.Anthropic) -> None:
    as_blocks = client.messages.count_tokens(
        model=MODEL,
        system=[{"type": "text", "text": "Rule one."}, {"type": "text", "text": "Rule two."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
    )
    as_strings = client.messages.count_tokens(
        model=MODEL, system="Rule one.\nRule two.", messages=[{"role": "user", "content": "Hi"}]
    )
    assert as_blocks.input_tokens == as_strings.input_tokens > 0


def test_thinking_disabled_closes_the_think_block_in_the_prompt(
    client: anthropic.Anthropic,
) -> None:
    on = client.messages.count_tokens(model=MODEL, messages=ask())
    off = client.messages.count_tokens(model=MODEL, messages=ask(), thinking={"type": "disabled"})
    assert off.input_tokens > on.input_tokens


def test_final_assistant_message_is_continued(client: anthropic.Anthropic) -> None:
    messages = [*ask("Count to three."), {"role": "assistant", "content": "One, two,"}]
    reply = client.messages.create(
        model=MODEL, max_tokens=20, messages=messages, extra_body={"mock": {"output": " three."}}
    )
    assert blocks(reply) == [{"type": "text", "text": " three."}]
    closed = client.messages.count_tokens(model=MODEL, messages=[*messages, *ask("Go on.")])
    continued = client.messages.count_tokens(model=MODEL, messages=messages)
    assert continued.input_tokens < closed.input_tokens


def test_tool_choice_any_and_named_tool(client: anthropic.Anthropic) -> None:
    # `any` is `required`: the mocker accepts constraints, so the model writes
    # the JSON array the constraint forces; under `auto`, hermes markup.
    forced = '[{"name": "get_weather", "parameters": {"city": "Rome"}}]'
    outputs = {"any": forced, "auto": hermes("get_weather", {"city": "Rome"})}
    for choice in ({"type": "any"}, {"type": "auto", "disable_parallel_tool_use": True}):
        reply = client.messages.create(
            model=MODEL,
            max_tokens=100,
            messages=ask(),
            tools=[WEATHER, TIME],
            tool_choice=choice,
            extra_body={"mock": {"output": outputs[choice["type"]]}},
        )
        assert blocks(reply) == [
            {"type": "tool_use", "name": "get_weather", "input": {"city": "Rome"}}
        ]
        assert reply.stop_reason == "tool_use"
    # a named tool: the output is that tool's arguments object
    reply = client.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=ask(),
        tools=[WEATHER, TIME],
        tool_choice={"type": "tool", "name": "get_time"},
        extra_body={"mock": {"output": '{"zone": "UTC"}'}},
    )
    assert blocks(reply) == [{"type": "tool_use", "name": "get_time", "input": {"zone": "UTC"}}]
    assert reply.stop_reason == "tool_use"


# -- errors -------------------------------------------------------------------------------------


def test_bad_requests_raise_bad_request_in_anthropics_envelope(
    client: anthropic.Anthropic,
) -> None:
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=10, messages=ask(), extra_body={"bogus": 1})
    assert e.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "unknown field 'bogus'"},
    }
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
    }
    with pytest.raises(
        anthropic.BadRequestError,
        match=r"messages\[0\]\.content\[0\] is an image: the model .mock-model. takes text only",
    ):
        client.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": [image]}]
        )
    with pytest.raises(anthropic.BadRequestError, match="temperature"):
        client.messages.create(
            model=MODEL, max_tokens=10, messages=ask(), extra_body={"temperature": 1.5}
        )
    with pytest.raises(anthropic.BadRequestError, match="needs tools"):
        client.messages.create(
            model=MODEL, max_tokens=10, messages=ask(), tool_choice={"type": "any"}
        )
    with pytest.raises(anthropic.BadRequestError, match="maximum context length is 32768"):
        client.messages.create(model=MODEL, max_tokens=10**6, messages=ask(), timeout=30)


def test_missing_max_tokens_is_a_400(server: Server) -> None:
    r = httpx.post(server.v1 + "/messages", json={"model": MODEL, "messages": ask()})
    assert r.status_code == 400
    assert r.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "missing required field 'max_tokens'",
        },
    }


def test_routing_errors_use_anthropics_envelope(server: Server) -> None:
    r = httpx.get(server.v1 + "/messages")
    assert r.status_code == 405
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.get(server.v1 + "/models/nope", headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    # without anthropic-version, other routes keep the OpenAI envelope
    r = httpx.get(server.v1 + "/models/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == 404


def test_unknown_model_raises_not_found(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="no-such-model", max_tokens=10, messages=ask())
    assert e.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("no-such-model")


def test_engine_failure_is_an_api_error(client: anthropic.Anthropic) -> None:
    body = {"mock": {"output": "partial", "end": "error"}}
    with pytest.raises(anthropic.InternalServerError) as e:
        client.messages.create(model=MODEL, max_tokens=50, messages=ask(), extra_body=body)
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "api_error"
    # An engine that broke is the server's business: the client gets no internal text.
    assert e.value.body["error"]["message"] == "internal server error"
    with (
        pytest.raises(anthropic.APIStatusError, match="internal server error"),
        client.messages.stream(model=MODEL, max_tokens=50, messages=ask(), extra_body=body) as s,
    ):
        s.get_final_message()


def test_api_key_is_checked_with_anthropics_envelope() -> None:
    with rotor_server("out=mocker", "--speedup-ratio", "0", "--api-key", "sekrit") as srv:
        wrong = srv.anthropic(api_key="wrong")
        with pytest.raises(anthropic.AuthenticationError) as e:
            wrong.messages.create(model=MODEL, max_tokens=10, messages=ask())
        assert e.value.body["error"]["type"] == "authentication_error"
        right = srv.anthropic(api_key="sekrit")
        reply = right.messages.create(
            model=MODEL, max_tokens=10, messages=ask(), extra_body={"mock": {"output": "ok"}}
        )
        assert blocks(reply) == [{"type": "text", "text": "ok"}]


# -- models, ids, metrics ---------------------------------------------------------------------------


def test_models_answer_in_anthropics_shape(client: anthropic.Anthropic, server: Server) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].type == "model" and models.data[0].display_name == MODEL
    assert client.models.retrieve(MODEL).id == MODEL
    plain = httpx.get(server.v1 + "/models").json()
    assert plain["object"] == "list" and plain["data"][0]["owned_by"] == "rotor"


def test_request_id_and_metrics(client: anthropic.Anthropic, server: Server) -> None:
    labels = f'endpoint="messages",model="{MODEL}",status="200",stream="true"'
    plain = f'endpoint="messages",model="{MODEL}",status="200",stream="false"'
    before = server.metric("rotor_requests_total", labels)
    plain_before = server.metric("rotor_requests_total", plain)
    ttft_before = server.metric("rotor_time_to_first_token_seconds_count")
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=20,
        messages=ask(),
        extra_headers={"x-request-id": "anthropic-rid-1"},
        extra_body={"mock": {"output": "hi"}},
    )
    assert raw.headers["x-request-id"] == "anthropic-rid-1"
    assert raw.parse().id == "msg_anthropic-rid-1"
    with client.messages.stream(
        model=MODEL, max_tokens=20, messages=ask(), extra_body={"mock": {"output": "hi"}}
    ) as stream:
        stream.get_final_message()
    assert server.metric("rotor_requests_total", labels) == before + 1
    # TTFT is timed for the non-streaming request too.
    assert server.metric("rotor_time_to_first_token_seconds_count") == ttft_before + 2
    assert server.metric("rotor_requests_total", plain) == plain_before + 1


@pytest.fixture(scope="module")
def slow_server() -> Iterator[Server]:
    """10 ms decode steps slowed down 50 times (half a second a token), pings every 50 ms."""
    env = {"ROTOR_ANTHROPIC_PING_S": "0.05"}
    with rotor_server("out=mocker", "--speedup-ratio", "0.02", env=env) as srv:
        yield srv


def test_pings_while_the_model_is_quiet(slow_server: Server) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 20,
        "messages": ask(),
        "stream": True,
        "mock": {"output": "Hi"},
    }
    r = httpx.post(slow_server.v1 + "/messages", json=body, timeout=30)
    events = named_events(r)
    kinds = [k for k, _ in events]
    assert kinds.count("ping") >= 3
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    text = "".join(d["delta"]["text"] for k, d in events if k == "content_block_delta")
    assert text == "Hi"


def test_client_disconnect_aborts_the_engine_work(slow_server: Server) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 500,
        "messages": ask(),
        "stream": True,
        "mock": {"output": "word " * 200},
    }
    cancelled = f'endpoint="messages",model="{MODEL}",status="cancelled",stream="true"'
    # the module's other tests use this server too: what this request moved
    counters = ("rotor_disconnected_clients_total", "rotor_engine_steps_total")
    disconnects, steps = (slow_server.metric(name) for name in counters)
    cancels = slow_server.metric("rotor_requests_total", cancelled)
    with httpx.stream("POST", slow_server.v1 + "/messages", json=body, timeout=30) as r:
        for line in r.iter_lines():
            if "content_block_delta" in line:
                break
    # The disconnect counter is the last thing the server records: once it
    # moved, everything else about the request has been recorded too.
    wait_for(
        "the disconnect to be noticed",
        lambda: slow_server.metric("rotor_disconnected_clients_total") > disconnects,
    )
    assert slow_server.metric("rotor_disconnected_clients_total") == disconnects + 1
    assert slow_server.metric("rotor_requests_total", cancelled) == cancels + 1
    assert slow_server.metric("rotor_engine_active_requests") == 0
    assert slow_server.metric("rotor_requests_in_flight") == 0
    assert slow_server.metric("rotor_engine_steps_total") - steps < 20  # 200 words were scripted


# -- Beam ---------------------------------------------------------------------------------------------

BEAM_HEADER = " to=get_weather<|channel|>analysis <|constrain|>xml<|message|>"
PARIS = '<rfl:parameter name="city">Paris</rfl:parameter>'


@pytest.fixture(scope="module")
def beam_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[anthropic.Anthropic]:
    path: Path = beam_model(tmp_path_factory.mktemp("beam"))
    args = ("out=mocker", "--model-path", str(path), "--tool-call-parser", "beam")
    with rotor_server(*args, "--speedup-ratio", "0") as srv:
        yield srv.anthropic()


def test_beam_call_closed_by_eos_is_a_tool_use(beam_client: anthropic.Anthropic) -> None:
    """docs/beam.md B3: a call ended by `<|return|>` under the turn grammar."""
    kw = {"model": "beam-model", "max_tokens": 100, "messages": ask(), "tools": [WEATHER]}
    body = {"mock": {"output": BEAM_HEADER + PARIS, "end": "eos"}}
    message = beam_client.messages.create(**kw, extra_body=body)
    with beam_client.messages.stream(**kw, extra_body=body) as stream:
        streamed = stream.get_final_message()
    assert blocks(message) == [
        {"type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}}
    ]
    assert message.stop_reason == "tool_use"
    assert summary(streamed) == summary(message)


def test_beam_malformed_call_at_eos_is_an_api_error(beam_client: anthropic.Anthropic) -> None:
    """docs/beam.md B8: a partial parameter at EOS is a request error, never a partial call."""
    kw = {"model": "beam-model", "max_tokens": 100, "messages": ask(), "tools": [WEATHER]}
    body = {"mock": {"output": BEAM_HEADER + '<rfl:parameter name="city">Par', "end": "eos"}}
    with pytest.raises(anthropic.InternalServerError) as e:
        beam_client.messages.create(**kw, extra_body=body)
    assert e.value.body["error"]["type"] == "api_error"
    seen = []
    with (
        pytest.raises(anthropic.APIStatusError, match="malformed tool call"),
        beam_client.messages.stream(**kw, extra_body=body) as stream,
    ):
        seen.extend(stream)
    assert not [e for e in seen if e.type == "content_block_start"]


def test_stream_start_and_delta_usage_agree_with_the_message(server: Server) -> None:
    """message_start and message_delta report the same input counts, cache
    reads included, and the non-streamed message the same again."""
    prompt = ask("Tell me about the sea. " * 40)  # many KV blocks: a repeat reads them from cache
    body = {"model": MODEL, "max_tokens": 8, "messages": prompt, "mock": {"output": "Waves."}}
    headers = {"anthropic-version": "2023-06-01"}
    httpx.post(server.v1 + "/messages", json=body, headers=headers).raise_for_status()  # warm
    r = httpx.post(server.v1 + "/messages", json={**body, "stream": True}, headers=headers)
    assert r.status_code == 200
    data = {k: d for k, d in named_events(r)}
    start, delta = data["message_start"]["message"]["usage"], data["message_delta"]["usage"]
    keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    assert start["cache_read_input_tokens"] > 0  # the repeat did hit the cache
    assert {k: start[k] for k in keys} == {k: delta[k] for k in keys}
    assert start["output_tokens"] == 0 and delta["output_tokens"] > 0
    whole = httpx.post(server.v1 + "/messages", json=body, headers=headers).json()["usage"]
    assert whole == delta
    count = {"model": MODEL, "messages": prompt}
    counted = httpx.post(server.v1 + "/messages/count_tokens", json=count, headers=headers)
    assert (
        start["input_tokens"] + start["cache_read_input_tokens"] == counted.json()["input_tokens"]
    )
