"""Content parts rotor cannot serve, over each API with its SDK: audio, files
and documents are a 400 whose message names the part's path and type and says
rotor takes text and images; an image sent to a text-only model is a 400
naming the part and saying the model takes text only — never a part dropped
on the way to the template. Text parts keep working."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from support.server import Server, rotor_server

MODEL = "mock-model"
PNG = "data:image/png;base64,iVBORw0KGgo="
TEXT = {"type": "text", "text": "What is this?"}
RESULT_TEXT = {"type": "text", "text": "42"}

CHAT_PARTS = [
    ("image_url", {"type": "image_url", "image_url": {"url": PNG}}),
    ("input_audio", {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}),
    ("file", {"type": "file", "file": {"file_id": "file-abc"}}),
    ("video_url", {"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}}),
]
ANTHROPIC_BLOCKS = [
    (
        "image",
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
    ),
    (
        "document",
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hi"}},
    ),
]
RESPONSES_PARTS = [
    ("input_image", {"type": "input_image", "image_url": PNG}),
    ("input_file", {"type": "input_file", "file_id": "file-abc"}),
    ("input_audio", {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}),
]


IMAGES = ("image_url", "image", "input_image")


def _article(kind: str) -> str:
    return "an" if kind[0] in "aeiou" else "a"


# (id, route, body, the part's path, its type, its noun, the error's param or None)
CASES: list[tuple[str, str, dict[str, Any], str, str, str, str | None]] = []
for kind, part in CHAT_PARTS:
    CASES.append(
        (
            f"chat-{kind}",
            "/chat/completions",
            {
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": [TEXT, part]},
                ]
            },
            "messages[1].content[1]",
            kind,
            "part",
            "messages",
        )
    )
for kind, block in ANTHROPIC_BLOCKS:
    CASES.append(
        (
            f"messages-{kind}",
            "/messages",
            {"max_tokens": 8, "messages": [{"role": "user", "content": [TEXT, block]}]},
            "messages[0].content[1]",
            kind,
            "block",
            None,
        )
    )
    tool_result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [RESULT_TEXT, block]}
    CASES.append(
        (
            f"messages-tool-result-{kind}",
            "/messages",
            {
                "max_tokens": 8,
                "messages": [
                    {"role": "user", "content": "Look it up."},
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
                        ],
                    },
                    {"role": "user", "content": [tool_result]},
                ],
            },
            "messages[2].content[0].content[1]",
            kind,
            "block",
            None,
        )
    )
for kind, part in RESPONSES_PARTS:
    CASES.append(
        (
            f"responses-{kind}",
            "/responses",
            {
                "max_output_tokens": 8,
                "input": [
                    {"role": "user", "content": [{"type": "input_text", "text": "What?"}, part]}
                ],
            },
            "input[0].content[1]",
            kind,
            "part",
            "input",
        )
    )
    CASES.append(
        (
            f"responses-tool-output-{kind}",
            "/responses",
            {
                "max_output_tokens": 8,
                "input": [
                    {"role": "user", "content": "Look it up."},
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c1", "output": [part]},
                ],
            },
            "input[2].output[0]",
            kind,
            "part",
            "input",
        )
    )


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
        yield srv


def _message(server: Server, route: str, body: dict[str, Any]) -> tuple[str, str | None]:
    """The 400's (message, param) through the route's SDK."""
    if route == "/messages":
        with pytest.raises(anthropic.BadRequestError) as caught_a:
            server.anthropic().messages.create(model=MODEL, **body)
        error = caught_a.value.body["error"]  # type: ignore[index]
        return error["message"], error.get("param")
    client = server.openai()
    with pytest.raises(openai.BadRequestError) as caught_o:
        if route == "/responses":
            client.responses.create(model=MODEL, **body)
        else:
            client.chat.completions.create(model=MODEL, max_tokens=8, **body)
    error = caught_o.value.body
    assert isinstance(error, dict)
    return error["message"], error["param"]


@pytest.mark.parametrize(
    ("route", "body", "path", "kind", "noun", "param"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_a_part_rotor_cannot_serve_is_a_400_naming_it(
    server: Server,
    route: str,
    body: dict[str, Any],
    path: str,
    kind: str,
    noun: str,
    param: str | None,
) -> None:
    message, got_param = _message(server, route, body)
    if kind in IMAGES:  # an image is served, but not by a text-only model
        assert message == f"{path} is an image: the model {MODEL!r} takes text only"
    else:
        assert message == (
            f"{path} is {_article(kind)} {kind} {noun}: rotor takes text and images "
            "(image_url parts), not this media"
        )
    assert got_param == param


@pytest.mark.parametrize(
    ("route", "body", "path"), [(c[1], c[2], c[3]) for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_streamed_request_is_refused_before_the_stream(
    server: Server, route: str, body: dict[str, Any], path: str
) -> None:
    r = httpx.post(
        server.v1 + route,
        json={"model": MODEL, "stream": True, **body},
        headers={"anthropic-version": "2023-06-01"},
        timeout=10,
    )
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert f"{path} is " in r.text


@pytest.mark.parametrize(
    ("part", "shown"),
    [
        ({"type": "refusal", "refusal": "no"}, "type 'refusal'"),
        ({"type": "input_text", "text": "hi"}, "type 'input_text'"),
        ({"text": "hi"}, "no type"),
    ],
    ids=["refusal", "other-api-type", "untyped"],
)
def test_a_chat_part_of_another_type_names_its_type(
    server: Server, part: dict[str, Any], shown: str
) -> None:
    messages = [{"role": "user", "content": [TEXT, part]}]
    message, param = _message(server, "/chat/completions", {"messages": messages})
    assert message.startswith(f"messages[0].content[1] has {shown}: rotor serves text parts")
    assert param == "messages"


def test_text_parts_keep_working(server: Server) -> None:
    """Text given as parts prompts exactly as the same text given as a string."""
    script = {"mock": {"output": "ok"}}
    split = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]
    whole = server.openai().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": split}],  # type: ignore[list-item]
        extra_body=script,
    )
    assert whole.choices[0].message.content == "ok"
    assert whole.usage is not None
    as_string = server.tokenize(messages=[{"role": "user", "content": "Hello there"}])
    assert whole.usage.prompt_tokens == len(as_string)

    reply = server.anthropic().messages.create(
        model=MODEL,
        max_tokens=8,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}],
        extra_body=script,
    )
    assert [b.text for b in reply.content if b.type == "text"] == ["ok"]

    resp = server.openai().responses.create(
        model=MODEL,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Hello there"}]}],
        extra_body=script,
    )
    assert resp.output_text == "ok"
