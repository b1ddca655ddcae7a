"""Stored responses end to end (`rotor run`, the official `openai` SDK, raw
HTTP where the wire matters): kept by default and retrieved as returned,
listed, deleted; chained by `previous_response_id` with the whole
conversation in the next prompt; run in the background, polled, cancelled;
a stream's end stored as it ended.

What the model saw is observed as its prompt's length: the chained turn's
`usage.input_tokens` is exactly the length of the chat it should be,
rendered by the server's own template (`/tokenize`), and that length
changes if the reasoning, the tool call or the old instructions were
(or were not) in it. The built-in model's template drops reasoning, as many
do for earlier turns: the server here runs it with one that renders it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from rotor.model.builtin import CHATML_TEMPLATE

from support.scripts import hermes
from support.server import Server, rotor_server
from support.wait import wait_for

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
CHAT_TOOLS = [
    {"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters")}}
]
RUNNING = ("queued", "in_progress")


ASSISTANT = "<|im_start|>assistant\n{% if message.content %}"
# the built-in template, with an assistant turn's reasoning rendered
TEMPLATE = CHATML_TEMPLATE.replace(
    ASSISTANT,
    "<|im_start|>assistant\n{% if message.reasoning_content %}<think>"
    "{{ message.reasoning_content }}</think>{% endif %}{% if message.content %}",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    assert CHATML_TEMPLATE.count(ASSISTANT) == 1
    template = tmp_path_factory.mktemp("template") / "reasoning.jinja"
    template.write_text(TEMPLATE)
    with rotor_server(
        "out=mocker", "--speedup-ratio", "0", "--chat-template", str(template)
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


@pytest.fixture(scope="module")
def slow() -> Iterator[Server]:
    """The echo engine at 50 ms a character: a long input runs long enough to be stopped."""
    with rotor_server("out=echo", env={"ROTOR_ECHO_DELAY_MS": "50"}) as srv:
        yield srv


def mock(output: str, **more: Any) -> dict[str, Any]:
    return {"mock": {"output": output, **more}}


def finished(client: openai.OpenAI, response_id: str) -> Any:
    """The response once it is no longer queued or in progress (polled)."""
    seen: list[Any] = []

    def done() -> bool:
        seen.append(client.responses.retrieve(response_id))
        return seen[-1].status not in RUNNING

    wait_for(f"{response_id} to finish", done, timeout=30)
    return seen[-1]


def engine_state(server: Server) -> dict[str, int]:
    engines = httpx.get(server.url + "/health", timeout=5).json()["engines"]
    return next(iter(engines.values()))


# -- kept, read, deleted ------------------------------------------------------------------------


def test_a_response_is_kept_as_returned_and_deleted(client: openai.OpenAI) -> None:
    made = client.responses.create(
        model=MODEL, input="Hello!", instructions="Be kind.", extra_body=mock("Hi there.")
    )
    assert made.store is True and made.background is False
    got = client.responses.retrieve(made.id)
    assert got.model_dump() == made.model_dump()
    items = client.responses.input_items.list(made.id)
    assert [(i.type, i.role, i.content[0].text) for i in items.data] == [  # type: ignore[union-attr]
        ("message", "user", "Hello!")
    ]
    client.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError, match=made.id):
        client.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(made.id)


def test_store_false_keeps_nothing(client: openai.OpenAI) -> None:
    made = client.responses.create(model=MODEL, input="hi", store=False, extra_body=mock("ok"))
    assert made.output_text == "ok" and made.store is False
    with pytest.raises(openai.NotFoundError, match=made.id):
        client.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model=MODEL, input="more", previous_response_id=made.id)
    assert e.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_a_streamed_response_is_kept_as_its_last_event_said(client: openai.OpenAI) -> None:
    events = client.responses.create(
        model=MODEL, input="Stream it", stream=True, extra_body=mock("<think>ok</think>Streamed.")
    )
    final = [e for e in events if e.type == "response.completed"][0].response
    assert final.status == "completed" and final.output_text == "Streamed."
    assert client.responses.retrieve(final.id).model_dump() == final.model_dump()


def test_unknown_ids_are_404s_naming_them(server: Server, client: openai.OpenAI) -> None:
    for call in (
        lambda: client.responses.retrieve("resp_nope"),
        lambda: client.responses.delete("resp_nope"),
        lambda: client.responses.cancel("resp_nope"),
        lambda: client.responses.input_items.list("resp_nope"),
    ):
        with pytest.raises(openai.NotFoundError, match="resp_nope"):
            call()
    r = httpx.get(server.v1 + "/responses/cancel_resp_nope", timeout=5)  # no marker is a response
    assert r.status_code == 404, r.text


def test_a_client_s_request_id_names_one_stored_response(client: openai.OpenAI) -> None:
    headers = {"x-request-id": "stored-once"}
    made = client.responses.create(
        model=MODEL, input="a", extra_headers=headers, extra_body=mock("a")
    )
    assert made.id == "resp_stored-once"
    with pytest.raises(openai.ConflictError, match="resp_stored-once"):
        client.responses.create(model=MODEL, input="b", extra_headers=headers, extra_body=mock("b"))
    assert client.responses.retrieve(made.id).output_text == "a"


def test_input_items_page_newest_first(client: openai.OpenAI) -> None:
    made = client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": f"m{n}"} for n in range(5)],
        extra_body=mock("ok"),
    )
    page = client.responses.input_items.list(made.id, limit=2)
    assert [i.content[0].text for i in page.data] == ["m4", "m3"]  # type: ignore[union-attr]
    assert page.has_more is True
    every = list(client.responses.input_items.list(made.id, limit=2, order="asc"))
    assert [i.content[0].text for i in every] == [f"m{n}" for n in range(5)]  # type: ignore[union-attr]


# -- chains ------------------------------------------------------------------------------------


def test_a_chained_turn_sees_the_whole_conversation(server: Server, client: openai.OpenAI) -> None:
    first = client.responses.create(
        model=MODEL,
        instructions="Answer in French.",
        input="Weather in Paris?",
        tools=[WEATHER],
        extra_body=mock("<think>Need the tool.</think>" + hermes("get_weather", {"city": "Paris"})),
    )
    reasoning, call = first.output
    assert reasoning.type == "reasoning" and call.type == "function_call"
    second = client.responses.create(
        model=MODEL,
        instructions="Be brief.",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=[WEATHER],
        extra_body=mock("It is sunny."),
    )
    assert second.previous_response_id == first.id and second.output_text == "It is sunny."
    assistant = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Need the tool.",
        "tool_calls": [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": call.arguments},
            }
        ],
    }
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        assistant,
        {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"},
    ]

    def prompt_length(messages: list[dict[str, Any]]) -> int:
        return len(server.tokenize(messages=messages, tools=CHAT_TOOLS))

    assert second.usage is not None
    assert second.usage.input_tokens == prompt_length(chat)
    # ... and the length tells: without the reasoning, the call or with the old instructions
    no_reasoning = {k: v for k, v in assistant.items() if k != "reasoning_content"}
    others = [
        [chat[0], chat[1], no_reasoning, chat[3]],
        [chat[0], chat[1], {**assistant, "tool_calls": None}, chat[3]],
        [{"role": "system", "content": "Answer in French."}, *chat],
    ]
    for other in others:
        assert prompt_length(other) != second.usage.input_tokens, other
    # the third turn continues the second (whose record holds the first)
    third = client.responses.create(
        model=MODEL, previous_response_id=second.id, input="Thanks!", extra_body=mock("De rien.")
    )
    listed = list(client.responses.input_items.list(third.id, order="asc"))
    assert [i.type for i in listed] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]
    # deleting an earlier turn leaves the chain whole: each record holds its conversation
    client.responses.delete(first.id)
    fourth = client.responses.create(
        model=MODEL, previous_response_id=third.id, input="Bye", extra_body=mock("Au revoir.")
    )
    assert fourth.usage is not None and fourth.usage.input_tokens > third.usage.input_tokens  # type: ignore[union-attr]


# -- background --------------------------------------------------------------------------------


def test_a_background_response_is_polled_to_its_end(client: openai.OpenAI) -> None:
    made = client.responses.create(
        model=MODEL, input="Work", background=True, extra_body=mock("Done.")
    )
    assert (made.status, made.background, made.output) == ("queued", True, [])
    done = finished(client, made.id)
    assert (done.status, done.output_text, done.created_at) == (
        "completed",
        "Done.",
        made.created_at,
    )
    # a cancel of one that has ended returns it as it is
    assert client.responses.cancel(made.id).model_dump() == done.model_dump()
    failed = client.responses.create(
        model=MODEL, input="Work", background=True, extra_body=mock("x", end="error")
    )
    ended = finished(client, failed.id)
    assert ended.status == "failed" and ended.error is not None


def test_background_refusals(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="x", background=True, store=False)
    assert e.value.body["param"] == "background"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="x", background=True, stream=True)
    assert e.value.body["param"] == "background"  # type: ignore[index]
    made = client.responses.create(model=MODEL, input="x", extra_body=mock("y"))
    with pytest.raises(openai.BadRequestError, match="only a background response"):
        client.responses.cancel(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="nope", input="x", background=True)


def test_a_background_response_is_cancelled_and_its_work_stops(slow: Server) -> None:
    client = slow.openai()
    made = client.responses.create(input="x" * 2000, model="echo", background=True)
    wait_for(
        "the response to start",
        lambda: client.responses.retrieve(made.id).status == "in_progress",
        timeout=30,
    )
    assert engine_state(slow)["active_requests"] == 1
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="echo", input="more", previous_response_id=made.id)
    assert e.value.body["param"] == "previous_response_id"  # type: ignore[index]
    cancelled = client.responses.cancel(made.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(made.id).status == "cancelled"
    assert engine_state(slow)["active_requests"] == 0


def test_a_stream_left_midway_is_kept_cancelled(slow: Server) -> None:
    client = slow.openai()
    body = {"model": "echo", "input": "y" * 2000, "stream": True}
    with httpx.stream("POST", slow.v1 + "/responses", json=body, timeout=30) as r:
        lines = r.iter_lines()
        response_id = None
        for line in lines:
            if line.startswith("data: ") and response_id is None:
                response_id = httpx.Response(200, content=line[6:]).json()["response"]["id"]
            if line == "event: response.output_text.delta":
                break
        assert response_id is not None
        assert client.responses.retrieve(response_id).status == "in_progress"
    wait_for(
        "the stream's record to end",
        lambda: client.responses.retrieve(response_id).status != "in_progress",
        timeout=30,
    )
    kept = client.responses.retrieve(response_id)
    assert kept.status == "cancelled"
    (item,) = kept.output
    assert item.status == "incomplete" and 0 < len(item.content[0].text) < 2000  # type: ignore[union-attr]
    assert engine_state(slow)["active_requests"] == 0
