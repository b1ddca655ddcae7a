"""The official openai SDK reading streamed tool calls with its own stream
helpers (`client.chat.completions.stream(...)`: events and
`get_final_completion()`), against the built-in mocker model (hermes tool
calls, qwen3 reasoning), and getting what non-streaming `create` gets.

Non-strict function tools work with `.stream()` (the helper only *parses*
arguments of `strict` tools; others come back with `parsed_arguments=None`);
`openai.pydantic_function_tool(...)` gives strict tools whose arguments the
helper parses into the model class.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.scripts import hermes as _hermes
from support.server import Server, rotor_server


def hermes(name: str, args: dict[str, Any]) -> str:
    return _hermes(name, args, newlines=True)


MODEL = "mock-model"
MESSAGES = [{"role": "user", "content": "What is the weather in Paris, and the time?"}]
CALL_ID = re.compile(r"call_[A-Za-z0-9]{24}")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
        },
    },
]


WEATHER = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {"tz": "Europe/Paris"})


@dataclass
class Scenario:
    id: str
    output: str
    calls: list[tuple[str, dict[str, Any]]]
    content: str | None = None
    reasoning: str | None = None
    finish: str = "tool_calls"
    kwargs: dict[str, Any] = field(default_factory=dict)


SCENARIOS = [
    Scenario("one_call", hermes(*WEATHER), [WEATHER]),
    Scenario("two_parallel_calls", hermes(*WEATHER) + "\n" + hermes(*TIME), [WEATHER, TIME]),
    Scenario(
        "text_then_call",
        "Let me check.\n" + hermes(*WEATHER),
        [WEATHER],
        content="Let me check.\n",
    ),
    Scenario(
        "reasoning_then_call",
        "<think>The user wants the weather.</think>\n" + hermes(*WEATHER),
        [WEATHER],
        reasoning="The user wants the weather.",
    ),
    Scenario(
        "parallel_tool_calls_false_keeps_one",
        hermes(*WEATHER) + "\n" + hermes(*TIME),
        [WEATHER],
        kwargs={"parallel_tool_calls": False},
    ),
    Scenario(
        "named_tool_choice",
        json.dumps(WEATHER[1]),
        [WEATHER],
        finish="stop",
        kwargs={"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
    ),
]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


@dataclass
class Seen:
    """One response as the client sees it."""

    content: str | None
    reasoning: str | None
    calls: list[tuple[str, str, str]]  # (id, name, arguments)
    finish: str | None


def seen(choice: Any) -> Seen:
    msg = choice.message
    calls = [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or []]
    return Seen(
        msg.content or None, getattr(msg, "reasoning_content", None), calls, choice.finish_reason
    )


def mock(output: str, per_step: int = 1) -> dict[str, Any]:
    return {"mock": {"output": output, "tokens_per_step": per_step}}


def create(client: openai.OpenAI, sc: Scenario, tools: list[Any] = TOOLS) -> Seen:
    resp = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=tools, extra_body=mock(sc.output), **sc.kwargs
    )
    assert len(resp.choices) == 1
    return seen(resp.choices[0])


@dataclass
class Streamed:
    final: Seen
    completion: Any  # ParsedChatCompletion
    content_deltas: str
    content_done: list[str]
    args_deltas: list[tuple[int, str, str]]  # (index, name, arguments_delta)
    args_done: list[Any]  # FunctionToolCallArgumentsDoneEvent
    chunk_ids: list[str]  # call ids as the raw chunks carried them


def stream(
    client: openai.OpenAI, sc: Scenario, per_step: int = 1, tools: list[Any] = TOOLS
) -> Streamed:
    content, done, deltas, args_done, ids = [], [], [], [], []
    with client.chat.completions.stream(
        model=MODEL,
        messages=MESSAGES,
        tools=tools,
        extra_body=mock(sc.output, per_step),
        **sc.kwargs,
    ) as events:
        for event in events:
            if event.type == "content.delta":
                content.append(event.delta)
            elif event.type == "content.done":
                done.append(event.content)
            elif event.type == "tool_calls.function.arguments.delta":
                deltas.append((event.index, event.name, event.arguments_delta))
            elif event.type == "tool_calls.function.arguments.done":
                args_done.append(event)
            elif event.type == "chunk":
                for choice in event.chunk.choices:
                    ids.extend(c.id for c in choice.delta.tool_calls or [] if c.id)
        completion = events.get_final_completion()
    assert len(completion.choices) == 1
    return Streamed(
        seen(completion.choices[0]), completion, "".join(content), done, deltas, args_done, ids
    )


def check(got: Seen, sc: Scenario, how: str) -> None:
    where = f"{sc.id} ({how})"
    assert got.content == sc.content, f"{where}: content {got.content!r}"
    assert got.reasoning == sc.reasoning, f"{where}: reasoning {got.reasoning!r}"
    calls = [(name, json.loads(args)) for _, name, args in got.calls]
    assert calls == sc.calls, f"{where}: calls {calls!r}"
    for call_id, _, _ in got.calls:
        assert CALL_ID.fullmatch(call_id), f"{where}: id {call_id!r}"
    assert got.finish == sc.finish, f"{where}: finish_reason {got.finish!r}"


def check_events(s: Streamed, sc: Scenario) -> None:
    """The helper's events agree with its final completion: each call's arguments
    arrive whole in one delta event and are announced done once; content deltas
    add up to the content."""
    final = s.final
    assert s.content_deltas == (final.content or "")
    assert s.content_done == ([final.content] if final.content else [])
    whole = [(i, name, args) for i, (_, name, args) in enumerate(final.calls)]
    assert s.args_deltas == whole, f"{sc.id}: {s.args_deltas}"
    assert [(e.index, e.name, e.arguments) for e in s.args_done] == whole
    assert s.chunk_ids == [call_id for call_id, _, _ in final.calls]
    assert len(set(s.chunk_ids)) == len(s.chunk_ids), "call ids must be distinct"


@pytest.mark.parametrize("sc", SCENARIOS, ids=lambda sc: sc.id)
def test_stream_helper_gets_what_create_gets(client: openai.OpenAI, sc: Scenario) -> None:
    whole = create(client, sc)
    check(whole, sc, "create")
    for per_step in (1, 4):
        streamed = stream(client, sc, per_step)
        check(streamed.final, sc, f"stream, {per_step} tokens/step")
        check_events(streamed, sc)
        # Same calls as non-streaming; ids are fresh per response, same shape.
        assert [c[1:] for c in streamed.final.calls] == [c[1:] for c in whole.calls]
        assert (streamed.final.content, streamed.final.reasoning, streamed.final.finish) == (
            whole.content,
            whole.reasoning,
            whole.finish,
        )


def test_non_strict_tools_are_not_parsed_by_the_helper(client: openai.OpenAI) -> None:
    streamed = stream(client, SCENARIOS[0])
    assert [e.parsed_arguments for e in streamed.args_done] == [None]
    (call,) = streamed.completion.choices[0].message.tool_calls
    assert call.function.parsed_arguments is None


class GetWeather(pydantic.BaseModel):
    """Current weather of a city."""

    city: str


class GetTime(pydantic.BaseModel):
    tz: str


STRICT = [openai.pydantic_function_tool(GetWeather), openai.pydantic_function_tool(GetTime)]
STRICT_SC = Scenario(
    "strict",
    "Sure.\n" + hermes("GetWeather", {"city": "Paris"}) + hermes("GetTime", {"tz": "UTC"}),
    [("GetWeather", {"city": "Paris"}), ("GetTime", {"tz": "UTC"})],
    content="Sure.\n",
)


def test_strict_pydantic_tools_are_parsed_from_the_stream(client: openai.OpenAI) -> None:
    streamed = stream(client, STRICT_SC, per_step=3, tools=STRICT)
    check(streamed.final, STRICT_SC, "stream")
    check_events(streamed, STRICT_SC)
    want = [GetWeather(city="Paris"), GetTime(tz="UTC")]
    assert [e.parsed_arguments for e in streamed.args_done] == want
    calls = streamed.completion.choices[0].message.tool_calls
    assert [c.function.parsed_arguments for c in calls] == want

    parsed = client.chat.completions.parse(
        model=MODEL, messages=MESSAGES, tools=STRICT, extra_body=mock(STRICT_SC.output)
    )
    calls = parsed.choices[0].message.tool_calls
    assert [c.function.parsed_arguments for c in calls] == want


MIXED = Scenario(
    "reasoning_text_and_two_calls",
    "<think>Two tools: weather, then time. 🙂</think>Checking both — un momentó.\n"
    + hermes(*WEATHER)
    + "\n"
    + hermes(*TIME),
    [WEATHER, TIME],
    content="Checking both — un momentó.\n",
    reasoning="Two tools: weather, then time. 🙂",
)


@settings(max_examples=12, deadline=None)
@given(per_step=st.integers(1, 40))
def test_any_step_size_gives_the_same_final_completion(
    client: openai.OpenAI, per_step: int
) -> None:
    """However the engine groups tokens, the helper ends with the same message."""
    streamed = stream(client, MIXED, per_step)
    check(streamed.final, MIXED, f"stream, {per_step} tokens/step")
    check_events(streamed, MIXED)
