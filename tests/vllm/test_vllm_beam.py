"""Beam (docs/beam.md) against real vLLM: the turn grammar goes to vLLM as a
structural tag and vLLM enforces it. A random model never writes a Beam call
header by itself; under the grammar every call it makes is well formed, so
the B-cases a real engine can run are the ones that end in calls (B2/B3/B11:
closed calls, finish tool_calls), and LENGTH mid-turn (B6/B7: no error, a
complete body recovered, a partial one dropped)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from support.llama import add_llama_weights
from support.models import beam_model
from support.server import Server
from support.vllm_setup import vllm_server

TOOL = "weather.lookup"
# A boolean parameter is JSON inside the tag: the grammar then forces the
# value and its close, so a random model's calls are complete.
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
TOOLS = [{"type": "function", "function": {"name": TOOL, "parameters": SCHEMA}}]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
FORBIDDEN = ("<|", "|>", "<rfl:parameter", "</rfl:parameter", "rfl:")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model = add_llama_weights(beam_model(tmp_path_factory.mktemp("vllm"), "beam"), 2048)
    with vllm_server(model, "--tool-call-parser", "beam") as s:
        yield s


def _clean(text: str | None) -> None:
    assert not any(marker in (text or "") for marker in FORBIDDEN), text


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": TOOL}}]
)
def test_grammar_makes_every_call_well_formed(server: Server, tool_choice: object) -> None:
    client = server.openai()
    calls = 0
    for seed in (1, 2, 3, 4):
        r = client.chat.completions.create(
            model="beam",
            messages=MESSAGES,
            tools=TOOLS,
            tool_choice=tool_choice,
            temperature=1.0,
            seed=seed,
            max_tokens=120,
        )
        choice = r.choices[0]
        # a named tool_choice finishes `stop`, as OpenAI's does
        assert choice.finish_reason in ("tool_calls", "length", "stop")
        _clean(choice.message.content)
        _clean(getattr(choice.message, "reasoning_content", None))
        for call in choice.message.tool_calls or []:
            assert call.function.name == TOOL
            args = json.loads(call.function.arguments)
            assert set(args) <= {"ok"} and all(isinstance(v, bool) for v in args.values())
            calls += 1
        if choice.finish_reason == "tool_calls":
            assert choice.message.tool_calls
    # without the grammar a random model writes no Beam call at all
    assert calls > 0


def test_streaming_agrees_with_non_streaming(server: Server) -> None:
    client = server.openai()
    kw = dict(
        model="beam",
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        temperature=1.0,
        seed=2,
        max_tokens=120,
    )
    whole = client.chat.completions.create(**kw).choices[0].message
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    finish = None
    for chunk in client.chat.completions.create(**kw, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        _clean(delta.content)
        for tc in delta.tool_calls or []:
            if tc.function and tc.function.name:
                names[tc.index] = tc.function.name
            if tc.function and tc.function.arguments:
                arguments[tc.index] = arguments.get(tc.index, "") + tc.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    assert finish == client.chat.completions.create(**kw).choices[0].finish_reason
    expected = [(c.function.name, json.loads(c.function.arguments)) for c in whole.tool_calls or []]
    got = [(names[i], json.loads(arguments.get(i, "{}"))) for i in sorted(names)]
    assert got == expected
