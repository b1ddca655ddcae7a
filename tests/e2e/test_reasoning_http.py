"""Reasoning over HTTP: the built-in mocker model (reasoning parser qwen3, tool
parser hermes) with scripted outputs, through the official openai SDK and raw
SSE, streaming and not; parser choice by flag, by template and per request."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from support.server import Server, free_port, rotor_server
from support.sse import data_events

MODEL = "mock-model"
# a step at a time: the tests read how reasoning streams, delta by delta
MOCKER = ("out=mocker", "--speedup-ratio", "0", "--step-slice-ms", "0")
USER = [{"role": "user", "content": "What is 2+2?"}]
TOOLS = [
    {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {}}},
    }
]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server(*MOCKER) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


def body(output: str, tokens_per_step: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": USER,
        "mock": {"output": output, "end": "eos", "tokens_per_step": tokens_per_step},
        **extra,
    }


def post(srv: Server, payload: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(srv.v1 + "/chat/completions", json=payload, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()


def stream(srv: Server, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a streamed request, as the JSON the server sent."""
    with httpx.stream(
        "POST", srv.v1 + "/chat/completions", json={**payload, "stream": True}, timeout=30
    ) as resp:
        assert resp.status_code == 200, resp.read()
        return data_events(resp)


def fold(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client assembles from the deltas: one string per field, calls, finish."""
    out: dict[str, Any] = {"tool_calls": []}
    for chunk in chunks:
        for choice in chunk["choices"]:
            for key, value in choice["delta"].items():
                if key == "tool_calls":
                    out["tool_calls"].extend(value)
                elif key != "role":
                    out[key] = out.get(key, "") + value
            if choice.get("finish_reason"):
                out["finish_reason"] = choice["finish_reason"]
    return out


def prompt_text(srv: Server, **extra: Any) -> str:
    """The rendered prompt, through /tokenize with messages and /detokenize."""
    return srv.detokenize(srv.tokenize(messages=USER, model=MODEL, **extra), model=MODEL)


# -- the default: qwen3 ---------------------------------------------------------------------


THOUGHT = "The user asks 2+2. Grüße 東京 🙂"
ANSWER = "The answer is 4."


def test_reasoning_content_and_content(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model=MODEL,
        messages=USER,
        extra_body={"mock": {"output": f"<think>{THOUGHT}</think>{ANSWER}", "end": "eos"}},
    )
    message = resp.choices[0].message
    assert message.content == ANSWER
    assert message.model_extra["reasoning_content"] == THOUGHT
    assert "<think>" not in message.content
    assert resp.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("tokens_per_step", [1, 3])
def test_streaming_carries_reasoning_deltas_and_folds_to_the_response(
    server: Server, tokens_per_step: int
) -> None:
    output = f"<think>\n{THOUGHT}\n</think>\n\n{ANSWER}"
    whole = post(server, body(output, tokens_per_step))["choices"][0]["message"]
    chunks = stream(server, body(output, tokens_per_step))
    deltas = [
        (k, v)
        for c in chunks
        if c["choices"]
        for k, v in c["choices"][0]["delta"].items()
        if k != "role" and v
    ]
    kinds = [k for k, _ in deltas]
    assert kinds.count("reasoning_content") > 1, "reasoning is streamed as it arrives"
    # Reasoning first, then content: no content delta before the last reasoning delta.
    assert kinds == sorted(kinds, key=lambda k: k != "reasoning_content"), kinds
    folded = fold(chunks)
    # The whitespace convention: nothing trimmed on either side of the tags.
    assert folded["reasoning_content"] == whole["reasoning_content"] == f"\n{THOUGHT}\n"
    assert folded["content"] == whole["content"] == f"\n\n{ANSWER}"
    assert folded["finish_reason"] == "stop"


def test_no_reasoning_means_no_reasoning_field(server: Server) -> None:
    message = post(server, body(ANSWER))["choices"][0]["message"]
    assert message["content"] == ANSWER
    assert "reasoning_content" not in message
    assert "reasoning_content" not in fold(stream(server, body(ANSWER)))


def test_cut_off_while_thinking_keeps_the_reasoning(server: Server) -> None:
    payload = body(f"<think>{THOUGHT}")
    payload["mock"]["end"] = "length"
    for message in (post(server, payload)["choices"][0]["message"], fold(stream(server, payload))):
        assert message["reasoning_content"] == THOUGHT
        assert not message["content"]


def test_tool_markers_inside_reasoning_stay_reasoning(server: Server) -> None:
    output = (
        '<think>I\'ll use <tool_call></think><tool_call>{"name":"f","arguments":{}}</tool_call>'
    )
    resp = post(server, body(output, tools=TOOLS))
    choice = resp["choices"][0]
    assert choice["message"]["reasoning_content"] == "I'll use <tool_call>"
    assert choice["message"]["content"] is None
    calls = choice["message"]["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("f", {})
    ]
    assert choice["finish_reason"] == "tool_calls"
    folded = fold(stream(server, body(output, tools=TOOLS)))
    assert folded["reasoning_content"] == "I'll use <tool_call>"
    assert [c["function"]["name"] for c in folded["tool_calls"]] == ["f"]
    assert folded["finish_reason"] == "tool_calls"


def test_a_call_in_a_think_block_never_closed_ends_the_reasoning(server: Server) -> None:
    """Qwen3 on a long context starts its call before `</think>` (issue 13, defect 5)."""
    output = '<think>I\'ll call f.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    for per_step in (1, 4):
        payload = body(output, per_step, tools=TOOLS)
        for message in (
            post(server, payload)["choices"][0]["message"],
            fold(stream(server, payload)),
        ):
            assert message["reasoning_content"] == "I'll call f.\n", message
            assert not message.get("content"), message
            assert [c["function"]["name"] for c in message["tool_calls"]] == ["f"], message


@pytest.mark.parametrize(
    "extra", [{}, {"tools": TOOLS, "tool_choice": "none"}], ids=["no-tools", "none"]
)
def test_without_a_tool_parser_the_call_in_an_unclosed_block_is_content(
    server: Server, extra: dict[str, Any]
) -> None:
    """No tool parser runs (no tools, or `none`): qwen3's own call start still ends
    the reasoning, and the section is content as written, marker included."""
    section = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    output = "<think>I'll call f.\n" + section
    for per_step in (1, 4):
        payload = body(output, per_step, **extra)
        for message in (
            post(server, payload)["choices"][0]["message"],
            fold(stream(server, payload)),
        ):
            assert message["reasoning_content"] == "I'll call f.\n", message
            assert message["content"] == section, message
            assert not message.get("tool_calls"), message


@pytest.mark.parametrize("kwargs", [{"enable_thinking": False}, {"thinking": False}])
def test_thinking_off_leaves_think_text_in_content(server: Server, kwargs: dict) -> None:
    output = f"<think>{THOUGHT}</think>{ANSWER}"
    payload = body(output, chat_template_kwargs=kwargs)
    for message in (post(server, payload)["choices"][0]["message"], fold(stream(server, payload))):
        assert message["content"] == output
        assert "reasoning_content" not in message


def test_thinking_off_template_adds_the_empty_think_block(server: Server) -> None:
    off = prompt_text(server, chat_template_kwargs={"enable_thinking": False})
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    on = prompt_text(server)
    assert on.endswith("<|im_start|>assistant\n")
    assert "<think>" not in on


def test_thinking_on_explicitly_still_parses(server: Server) -> None:
    payload = body(
        f"<think>{THOUGHT}</think>{ANSWER}", chat_template_kwargs={"enable_thinking": True}
    )
    message = post(server, payload)["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (THOUGHT, ANSWER)


# -- --reasoning-field reasoning ------------------------------------------------------------


def test_reasoning_field_flag_renames_the_field() -> None:
    output = f"<think>{THOUGHT}</think>{ANSWER}"
    with rotor_server(*MOCKER, "--reasoning-field", "reasoning") as srv:
        message = post(srv, body(output))["choices"][0]["message"]
        chunks = stream(srv, body(output))
    assert message["reasoning"] == THOUGHT
    assert message["content"] == ANSWER
    assert "reasoning_content" not in message
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert any("reasoning" in d for d in deltas)
    assert not any("reasoning_content" in d for d in deltas)
    assert fold(chunks)["reasoning"] == THOUGHT


# -- --reasoning-parser deepseek_r1: starts inside ----------------------------------------------


def test_deepseek_r1_flag_starts_inside() -> None:
    with rotor_server(*MOCKER, "--reasoning-parser", "deepseek_r1") as srv:
        message = post(srv, body("abc</think>def"))["choices"][0]["message"]
        folded = fold(stream(srv, body("abc</think>def")))
        repeated = post(srv, body("<think>abc</think>def"))["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("abc", "def")
    assert (folded["reasoning_content"], folded["content"]) == ("abc", "def")
    assert (repeated["reasoning_content"], repeated["content"]) == ("abc", "def")


# -- a template that opens the block itself --------------------------------------------------


THINKING_TEMPLATE = """\
{%- for message in messages %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}"""


def test_prompt_ending_with_the_start_tag_starts_inside(tmp_path: Path) -> None:
    template = tmp_path / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE, encoding="utf-8")
    output = f"{THOUGHT}\n</think>\n\n{ANSWER}"
    with rotor_server(*MOCKER, "--chat-template", str(template)) as srv:
        assert prompt_text(srv).endswith("<|im_start|>assistant\n<think>\n")
        message = post(srv, body(output))["choices"][0]["message"]
        folded = fold(stream(srv, body(output)))
        plain = post(srv, body(ANSWER))["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (f"{THOUGHT}\n", f"\n\n{ANSWER}")
    assert (folded["reasoning_content"], folded["content"]) == (f"{THOUGHT}\n", f"\n\n{ANSWER}")
    # Inside from the first token: an output that never closes the block is reasoning.
    assert plain["reasoning_content"] == ANSWER
    assert not plain["content"]


# -- bad names stop startup --------------------------------------------------------------------


def start_fails(*flags: str) -> str:
    """Run `rotor run` with flags that must stop it; returns its stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "rotor.cli", "run", *MOCKER, *flags, "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc.stderr


def test_unknown_reasoning_parser_fails_startup_listing_valid_names() -> None:
    err = start_fails("--reasoning-parser", "nope")
    assert "nope" in err
    for name in ("qwen3", "deepseek_r1", "granite", "mistral", "kimi"):
        assert name in err, err


def test_unknown_tool_call_parser_fails_startup_listing_valid_names() -> None:
    err = start_fails("--tool-call-parser", "nope")
    assert "nope" in err
    for name in ("hermes", "llama3_json", "mistral", "pythonic", "deepseek_v3"):
        assert name in err, err


# -- reasoning tags that are special tokens (issue 13, defect 6) -------------------------------


SPECIAL_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# (reasoning parser, its tags as special tokens, model output, reasoning, content)
SPECIAL_TAGS = [
    ("mistral", ("[THINK]", "[/THINK]"), f"[THINK]{THOUGHT}[/THINK]{ANSWER}", THOUGHT, ANSWER),
    (
        "gemma4",
        ("<|channel>", "<channel|>"),
        f"<|channel>thought\n{THOUGHT}<channel|>{ANSWER}",
        THOUGHT,
        ANSWER,
    ),
]


@pytest.mark.parametrize(("parser", "tags", "output", "thought", "answer"), SPECIAL_TAGS)
def test_special_token_tags_reach_the_parser_and_never_the_client(
    tmp_path: Path, parser: str, tags: tuple[str, ...], output: str, thought: str, answer: str
) -> None:
    """No tool parser, so special tokens are skipped by default: the reasoning
    tags must still be seen (and stripped), other special tokens still skipped."""
    from support.models import family_model

    model = family_model(
        tmp_path,
        special_tokens=("<|eos|>", "<|im_start|>", "<|im_end|>", "<|extra|>", *tags),
        eos_token="<|eos|>",
        template=SPECIAL_TEMPLATE,
        name="special-tags",
    )
    noisy = f"{output}<|extra|>"
    with rotor_server(*MOCKER, "--model-path", str(model), "--reasoning-parser", parser) as srv:
        for extra in ({}, {"skip_special_tokens": True}):
            payload = {**body(noisy, **extra), "model": "special-tags"}
            for message in (
                post(srv, payload)["choices"][0]["message"],
                fold(stream(srv, payload)),
            ):
                assert message["reasoning_content"] == thought, message
                assert message["content"] == answer, message
        # Asked to keep special tokens: the others show, the tags still do not.
        payload = {**body(noisy, skip_special_tokens=False), "model": "special-tags"}
        message = post(srv, payload)["choices"][0]["message"]
        assert (message["reasoning_content"], message["content"]) == (thought, answer + "<|extra|>")
