"""A chained turn's chat: the previous response's conversation (its input,
earlier turns' included, then its output: reasoning, message and function
calls) followed by the new input, converted as any input is; the new
request's instructions first, the previous one's not carried over."""

from __future__ import annotations

from typing import Any

from rotor.api.responses.chain import as_input, history, request_items
from rotor.api.responses.convert import to_chat
from rotor.api.responses.record import Record
from rotor.protocol.responses import ResponsesRequest

# What rotor stored for a first turn: its input, and an output of reasoning,
# text and a function call (the items as items.py builds them).
FIRST = Record(
    response={
        "id": "resp_1",
        "instructions": "Answer in French.",
        "status": "completed",
        "output": [
            {
                "id": "rs_1_0",
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Need the tool."}],
                "status": "completed",
            },
            {
                "id": "msg_1_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {
                        "type": "output_text",
                        "text": "Let me look.",
                        "annotations": [],
                        "logprobs": [],
                    }
                ],
            },
            {
                "id": "fc_1_2",
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
                "status": "completed",
            },
        ],
    },
    input=[
        {
            "id": "msg_1_in0",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": "Weather in Paris?"}],
        }
    ],
)

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
}


def chat_of(req: dict[str, Any], previous: Record | None) -> list[dict[str, Any]]:
    request = ResponsesRequest.model_validate(req)
    return to_chat(request, as_input(history(previous))).messages  # type: ignore[return-value]


def test_the_new_input_follows_the_previous_conversation() -> None:
    tool_output = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    assert chat_of({"input": [tool_output], "previous_response_id": "resp_1"}, FIRST) == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "Need the tool.",
            "tool_calls": [CALL],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]


def test_instructions_are_the_new_request_s_only() -> None:
    messages = chat_of(
        {"input": "Thanks!", "instructions": "Be brief.", "previous_response_id": "resp_1"}, FIRST
    )
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert messages[-1] == {"role": "user", "content": "Thanks!"}
    assert not any("French" in str(m["content"]) for m in messages)
    without = chat_of({"input": "Thanks!", "previous_response_id": "resp_1"}, FIRST)
    assert without[0]["role"] == "user"


def test_a_chain_of_three_carries_every_turn() -> None:
    second_input = request_items(
        ResponsesRequest.model_validate(
            {"input": [{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]}
        ),
        "r2",
    )
    answer = {
        "id": "msg_r2_0",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Sunny.", "annotations": [], "logprobs": []}],
    }
    second = Record(
        {"id": "resp_r2", "status": "completed", "output": [answer]},
        [
            *history(FIRST),
            *second_input,
        ],
    )
    messages = chat_of({"input": "And Rome?", "previous_response_id": "resp_r2"}, second)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert messages[3]["content"] == "Sunny."


def test_request_items_have_ids_status_and_parts() -> None:
    req = ResponsesRequest.model_validate(
        {
            "input": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello", "id": "msg_mine"},
                {"type": "function_call_output", "call_id": "c", "output": "x"},
            ]
        }
    )
    assert request_items(req, "r9") == [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "hi"}],
            "id": "msg_r9_in0",
            "status": "completed",
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hello"}],
            "id": "msg_mine",
            "status": "completed",
        },
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": "x",
            "id": "fco_r9_in2",
            "status": "completed",
        },
    ]
    text = request_items(ResponsesRequest.model_validate({"input": "hey"}), "r1")
    assert text[0]["content"] == [{"type": "input_text", "text": "hey"}]
    # what is stored reads back as the input it was
    assert as_input(request_items(req, "r9"))[2].call_id == "c"  # type: ignore[union-attr]
