"""tool_choice through HTTP (the mocker serving the built-in ChatML model,
hermes tool calls): the 400 of an inconsistent `tool_choice`, and the
`finish_reason` rules of docs/tool-calling.md, streaming and not. What preprocess
decides for each choice is tested in-process in tests/pipeline/test_preprocess_tools.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from support.scripts import hermes
from support.server import Server, rotor_server
from support.tool_choice import INCONSISTENT, MESSAGES, NAMED, TOOLS

HERMES_CALL = hermes("get_weather", {"city": "Paris"}, newlines=True)
HERMES_CALL_2 = hermes("get_time", {"zone": "CET"}, newlines=True)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """The mocker serving the built-in ChatML model (hermes tool calls)."""
    with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


@pytest.mark.parametrize("fields", [f for _, f in INCONSISTENT], ids=[i for i, _ in INCONSISTENT])
@pytest.mark.parametrize("stream", [False, True])
def test_http_inconsistent_tool_choice_is_a_400(
    server: Server, fields: dict[str, Any], stream: bool
) -> None:
    body = {"messages": MESSAGES, "stream": stream, **fields}
    r = httpx.post(server.v1 + "/chat/completions", json=body, timeout=10)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == "tool_choice"
    assert err["code"] == 400 and err["message"]


def _finish(client: openai.OpenAI, stream: bool, **kw: Any) -> tuple[str, list[str], str]:
    """(finish_reason, called tool names, content) of one request, either way."""
    args: dict[str, Any] = {"model": "mock-model", "messages": MESSAGES, **kw}
    if not stream:
        resp = client.chat.completions.create(**args)
        choice = resp.choices[0]
        names = [c.function.name for c in choice.message.tool_calls or []]
        return choice.finish_reason, names, choice.message.content or ""
    finishes: list[str] = []
    names = []
    text = ""
    for chunk in client.chat.completions.create(stream=True, **args):
        for c in chunk.choices:
            text += c.delta.content or ""
            names += [t.function.name for t in c.delta.tool_calls or [] if t.function]
            if c.finish_reason is not None:
                finishes.append(c.finish_reason)
    assert len(finishes) == 1, finishes  # exactly one chunk carries it
    return finishes[0], names, text


FINISH_CASES = [
    # (id, mock output, mock end, extra fields, finish_reason, calls)
    ("call-eos", HERMES_CALL, "eos", {}, "tool_calls", ["get_weather"]),
    ("call-eof", HERMES_CALL, "eof", {}, "tool_calls", ["get_weather"]),
    ("call-bare-stop", HERMES_CALL, "stop", {}, "tool_calls", ["get_weather"]),
    ("call-length", HERMES_CALL, "length", {}, "length", ["get_weather"]),
    ("no-call-eos", "Sunny.", "eos", {}, "stop", []),
    ("no-call-length", "Sunny.", "length", {}, "length", []),
    (
        "two-calls-one-allowed",
        HERMES_CALL + HERMES_CALL_2,
        "eos",
        {"parallel_tool_calls": False},
        "tool_calls",
        ["get_weather"],
    ),
    ("named", '{"city": "Paris"}', "eos", {"tool_choice": NAMED}, "stop", ["get_weather"]),
    (
        "named-length",
        '{"city": "Paris"}',
        "length",
        {"tool_choice": NAMED},
        "length",
        ["get_weather"],
    ),
    ("none", HERMES_CALL, "eos", {"tool_choice": "none"}, "stop", []),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("output", "end", "fields", "finish", "names"),
    [c[1:] for c in FINISH_CASES],
    ids=[c[0] for c in FINISH_CASES],
)
def test_http_finish_reason_follows_tool_calling_md(
    client: openai.OpenAI,
    stream: bool,
    output: str,
    end: str,
    fields: dict[str, Any],
    finish: str,
    names: list[str],
) -> None:
    got = _finish(
        client,
        stream,
        tools=TOOLS,
        extra_body={"mock": {"output": output, "end": end, "tokens_per_step": 2}},
        **fields,
    )
    assert got[:2] == (finish, names)
    if fields.get("tool_choice") == "none":
        assert got[2] == HERMES_CALL  # parsing off: the markup is content
