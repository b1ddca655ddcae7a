"""The client's stream reader: what a stream says (output events, text, usage,
its end) must not depend on how the bytes are split into reads."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rotor.bench.client import Measure, StreamError, build_body


def sse(events: list[dict | str], named: bool = False) -> bytes:
    out = b""
    for e in events:
        data = e if isinstance(e, str) else orjson.dumps(e).decode()
        name = f"event: {e['type']}\n" if named and isinstance(e, dict) else ""
        out += f"{name}data: {data}\n\n".encode()
    return out


def chunk(**delta) -> dict:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


CHAT = sse(
    [
        chunk(role="assistant", content=""),
        chunk(content="Hel"),
        chunk(reasoning_content="hmm"),
        chunk(content="lo ☃"),
        chunk(tool_calls=[{"index": 0, "id": "call_1", "function": {"name": "f"}}]),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 12,
                "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 8},
            },
        },
        "[DONE]",
    ]
)
MESSAGES = sse(
    [
        {"type": "message_start", "message": {"usage": {"input_tokens": 30, "output_tokens": 0}}},
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "b"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 20, "output_tokens": 2},
        },
        {"type": "message_stop"},
    ],
    named=True,
)
RESPONSES = sse(
    [
        {"type": "response.created", "response": {"usage": None}},
        {"type": "response.output_text.delta", "delta": "x"},
        {"type": "response.function_call_arguments.delta", "delta": "{}"},
        {"type": "response.output_text.delta", "delta": "y"},
        {
            "type": "response.incomplete",
            "response": {
                "usage": {
                    "input_tokens": 9,
                    "output_tokens": 3,
                    "input_tokens_details": {"cached_tokens": 4},
                }
            },
        },
    ],
    named=True,
)
COMPLETIONS = sse(
    [
        {"choices": [{"index": 0, "text": "one"}]},
        {"choices": [{"index": 0, "text": ""}]},
        {"choices": [{"index": 0, "text": " two"}]},
        {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}},
        "[DONE]",
    ]
)
CASES = {
    "chat": (CHAT, 4, "Hello ☃", (12, 5, 8)),
    "messages": (MESSAGES, 2, "ab", (30, 2, 20)),
    "responses": (RESPONSES, 3, "xy", (9, 3, 4)),
    "completions": (COMPLETIONS, 2, "one two", (4, 2, None)),
}


def read(api: str, pieces: list[bytes]) -> Measure:
    m = Measure(api)
    for p in pieces:
        m.on_body(p)
    return m


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


@pytest.mark.parametrize("api", CASES)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30), crlf=st.booleans())
def test_any_split_reads_the_same(api: str, cuts: list[int], crlf: bool) -> None:
    data, events, text, usage = CASES[api]
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    m = read(api, split(data, cuts))
    assert m.done
    assert m.ttft is not None
    assert len(m.itl) == events - 1  # one gap between each two output events
    assert "".join(m.text) == text
    assert (m.prompt_tokens, m.output_tokens, m.cached_tokens) == usage


def test_stream_errors_are_raised() -> None:
    with pytest.raises(StreamError, match="boom"):
        read("chat", [sse([chunk(content="a"), {"error": {"message": "boom"}}])])
    with pytest.raises(StreamError, match="overloaded"):
        read("messages", [sse([{"type": "error", "error": {"message": "overloaded"}}])])
    with pytest.raises(StreamError, match="not JSON"):
        read("chat", [b"data: {nope\n\n"])


def test_a_stream_without_its_end_is_not_done() -> None:
    assert not read("chat", [CHAT[: CHAT.index(b"data: [DONE]")]]).done


def test_bodies_per_api() -> None:
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    tools = [{"name": "f", "description": "d", "parameters": {"type": "object"}}]
    chat = build_body("chat", "m", msgs, 7, True, tools)
    assert chat["stream_options"] == {"include_usage": True} and chat["ignore_eos"] is True
    assert chat["tools"][0] == {"type": "function", "function": tools[0]}
    comp = build_body("completions", "m", msgs, 7, False, [])
    assert comp["prompt"] == "s\n\nu" and "ignore_eos" not in comp
    anth = build_body("messages", "m", msgs, 7, False, tools)
    assert anth["system"] == "s" and anth["messages"] == msgs[1:]
    assert anth["tools"][0]["input_schema"] == {"type": "object"}
    resp = build_body("responses", "m", msgs[1:], 7, False, tools)
    assert resp["input"] == "u" and resp["max_output_tokens"] == 7
    assert resp["tools"][0]["type"] == "function" and resp["tools"][0]["name"] == "f"
