"""`mock` scripts under `tool_choice` required / named, through HTTP with the
openai SDK, for three tool-call families (hermes: the built-in model; mistral
and qwen3_coder: model directories written here): a script in the
constraint's own form or in the family's call markup becomes a real tool
call, streamed and not; a script the constraint forbids is a 400 naming
`mock` that says why."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from support.models import family_model
from support.parsing import FAMILY_MARKERS
from support.server import Server, rotor_server

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}
TIME = {"type": "object", "properties": {"zone": {"type": "string"}}}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
MESSAGES = [{"role": "user", "content": "Weather and time in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
EOS = "<|eos|>"
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _hermes(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def _mistral(name: str, args: dict[str, Any]) -> str:
    return "[TOOL_CALLS]" + json.dumps([{"name": name, "arguments": args}])


def _qwen3_coder(name: str, args: dict[str, Any]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


# family → how that family's model writes one call
MARKUP = {"hermes": _hermes, "mistral": _mistral, "qwen3_coder": _qwen3_coder}
FAMILIES = list(MARKUP)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    root = tmp_path_factory.mktemp("mock-tool-choice")
    with ExitStack() as stack:
        out = {"hermes": stack.enter_context(rotor_server("out=mocker", "--speedup-ratio", "0"))}
        for family in ("mistral", "qwen3_coder"):
            out[family] = stack.enter_context(
                rotor_server(
                    "out=mocker",
                    "--model-path",
                    str(_model(root, family)),
                    "--tool-call-parser",
                    family,
                    "--speedup-ratio",
                    "0",
                )
            )
        yield out


def _model(root: Path, family: str) -> Path:
    markers = FAMILY_MARKERS[family]
    special = family == "mistral"  # its markers are special tokens, as in Mistral's vocab
    return family_model(
        root,
        special_tokens=(EOS, "<|im_start|>", "<|im_end|>", *(markers if special else ())),
        added_tokens=() if special else markers,
        eos_token=EOS,
        template=TEMPLATE,
        name=f"{family}-model",
    )


def _model_name(server: Server) -> str:
    return httpx.get(server.v1 + "/models", timeout=5).json()["data"][0]["id"]


def _ask(
    server: Server, stream: bool, tool_choice: Any, output: str | list[str], **kw: Any
) -> tuple[list[str | None], list[list[tuple[str, dict[str, Any]]]], list[str]]:
    """(finish_reason, calls, content) of each choice, through the openai SDK."""
    client: openai.OpenAI = server.openai()
    args: dict[str, Any] = {
        "model": _model_name(server),
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": tool_choice,
        "extra_body": {"mock": {"output": output, "tokens_per_step": 3}},
        **kw,
    }
    n = kw.get("n", 1)
    finishes: list[str | None] = [None] * n
    calls: list[list[tuple[str, dict[str, Any]]]] = [[] for _ in range(n)]
    texts = [""] * n
    if not stream:
        resp = client.chat.completions.create(**args)
        for c in resp.choices:
            finishes[c.index] = c.finish_reason
            texts[c.index] = c.message.content or ""
            for t in c.message.tool_calls or []:
                calls[c.index].append((t.function.name, json.loads(t.function.arguments)))
        return finishes, calls, texts
    for chunk in client.chat.completions.create(stream=True, **args):
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            for t in c.delta.tool_calls or []:
                assert t.function is not None and t.function.name  # each call whole in one delta
                calls[c.index].append((t.function.name, json.loads(t.function.arguments or "")))
            if c.finish_reason is not None:
                assert finishes[c.index] is None  # exactly one chunk carries it
                finishes[c.index] = c.finish_reason
    return finishes, calls, texts


PARIS = ("get_weather", {"city": "Paris"})
CET = ("get_time", {"zone": "CET"})


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("family", FAMILIES)
def test_named_tool_script_in_the_family_markup_is_a_call(
    servers: dict[str, Server], family: str, stream: bool
) -> None:
    script = MARKUP[family](*PARIS)
    got = _ask(servers[family], stream, NAMED, script)
    assert got == (["stop"], [[PARIS]], [""])  # a named tool ends in "stop", as OpenAI's


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("family", FAMILIES)
def test_required_script_in_the_family_markup_is_its_calls(
    servers: dict[str, Server], family: str, stream: bool
) -> None:
    markup = MARKUP[family]
    script = markup(*PARIS) + "\n" + markup(*CET)
    got = _ask(servers[family], stream, "required", script)
    assert got == (["tool_calls"], [[PARIS, CET]], [""])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_constraint_form_still_reads_and_choices_may_mix_forms(
    servers: dict[str, Server], family: str, stream: bool
) -> None:
    server = servers[family]
    named = _ask(server, stream, NAMED, '{"city": "Paris"}')
    assert named == (["stop"], [[PARIS]], [""])
    forced = '[{"name": "get_time", "parameters": {"zone": "CET"}}]'
    mixed = _ask(server, stream, "required", [forced, MARKUP[family](*PARIS)], n=2)
    assert mixed == (["tool_calls"] * 2, [[CET], [PARIS]], ["", ""])


# (id, tool_choice, script given a family's markup function, what the 400 says)
REFUSED: list[tuple[str, Any, Any, str]] = [
    ("named-other-tool", NAMED, lambda m: m(*CET), "calls 'get_time', not 'get_weather'"),
    (
        "named-two-calls",
        NAMED,
        lambda m: m(*PARIS) + "\n" + m(*PARIS),
        "makes 2 calls; a named tool_choice makes exactly one",
    ),
    (
        "named-args-miss-required",
        NAMED,
        lambda m: m("get_weather", {"days": 2}),
        "'city' is a required property",
    ),
    (
        "named-args-wrong-type",
        NAMED,
        lambda m: '{"city": "Paris", "days": "two"}',
        "'two' is not of type 'integer' (at arguments.days)",
    ),
    ("named-plain-text", NAMED, lambda m: "Sunny.", "makes no call: write the arguments object"),
    (
        "required-undeclared-tool",
        "required",
        lambda m: m("get_stock", {}),
        "calls 'get_stock', which is not among the tools",
    ),
    (
        "required-text-besides-calls",
        "required",
        lambda m: "Let me look. " + m(*PARIS),
        "has text besides its call(s): 'Let me look.'",
    ),
    ("required-plain-text", "required", lambda m: "Sunny.", "makes no call: write a JSON array"),
    (
        "required-forced-form-wrong-args",
        "required",
        lambda m: '[{"name": "get_weather", "parameters": {"city": 7}}]',
        "7 is not of type 'string' (at arguments.city)",
    ),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("tool_choice", "script", "why"),
    [r[1:] for r in REFUSED],
    ids=[r[0] for r in REFUSED],
)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_script_the_constraint_forbids_is_a_400_naming_mock(
    servers: dict[str, Server], family: str, tool_choice: Any, script: Any, why: str, stream: bool
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        _ask(servers[family], stream, tool_choice, script(MARKUP[family]))
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "mock"
    assert error["message"].startswith("mock.output: under tool_choice ")
    assert why in error["message"], error["message"]
    if why.startswith("makes no call"):
        assert f"the model's {family} markup" in error["message"]


def test_a_refused_choice_names_its_own_output(servers: dict[str, Server]) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        _ask(servers["hermes"], False, NAMED, ['{"city": "Paris"}', "Sunny."], n=2)
    assert caught.value.body["message"].startswith("mock.output[1]: ")  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_script_cut_short_is_played_as_written(servers: dict[str, Server], stream: bool) -> None:
    client = servers["hermes"].openai()
    body = {
        "model": "mock-model",
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": NAMED,
        "extra_body": {"mock": {"output": '{"city": "Par', "end": "length"}},
    }
    if not stream:
        choice = client.chat.completions.create(**body).choices[0]
        assert (choice.finish_reason, choice.message.content) == ("length", '{"city": "Par')
        return
    text, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **body):
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert (finish, text) == ("length", '{"city": "Par')


def test_anthropic_tool_choice_takes_the_markup_too(servers: dict[str, Server]) -> None:
    client = servers["hermes"].anthropic()
    tool = {"name": "get_weather", "input_schema": WEATHER}
    reply = client.messages.create(
        model="mock-model",
        max_tokens=64,
        messages=[{"role": "user", "content": "Weather?"}],
        tools=[tool],  # type: ignore[list-item]
        tool_choice={"type": "tool", "name": "get_weather"},
        extra_body={"mock": {"output": _hermes(*PARIS)}},
    )
    assert [(b.type, getattr(b, "input", None)) for b in reply.content] == [
        ("tool_use", {"city": "Paris"})
    ]
    assert reply.stop_reason == "tool_use"
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="mock-model",
            max_tokens=64,
            messages=[{"role": "user", "content": "Weather?"}],
            tools=[tool],  # type: ignore[list-item]
            tool_choice={"type": "tool", "name": "get_weather"},
            extra_body={"mock": {"output": "Sunny."}},
        )
    assert "mock.output: under tool_choice naming 'get_weather'" in str(caught.value)
