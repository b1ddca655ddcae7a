"""Beam end to end: every case B1–B25 of `docs/beam.md` through the HTTP API.

The mocker plays each case's model output (`mock` scripts); the End comes from
the script's `end` (`eos` emits `<|return|>` as the last token), from a visible
`<|call|>`, from the user's stops or from `max_tokens`. Every case runs
non-streaming and streaming over raw HTTP, so the raw bodies can be checked for
leaks; both must give the expected message and agree with each other.

G = yes: a server whose engine accepts structural tags (the turn grammar is
installed). G = no: a `--no-structural-tags` server, and requests that opt out
with `"turn_grammar": false` on the first server: both must behave the same.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.models import beam_model
from support.server import Server, rotor_server
from support.sse import data_events

TOOL = "weather.lookup"
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "q": {"type": "string"},
        "k": {"type": "string"},
    },
}
TOOLS = [{"type": "function", "function": {"name": TOOL, "parameters": SCHEMA}}]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]

RETURN = "<|return|>"
HEADER = f" to={TOOL}<|channel|>analysis <|constrain|>xml<|message|>"
LATER = "<|start|>assistant"  # a later segment repeats it
ANALYSIS = "<|channel|>analysis<|message|>Need the weather.<|end|>"
# Text the model (or the engine) sends after the End: it must never reach a client.
TAIL = "<|start|>assistant<|channel|>final<|message|>LEAKED"

CALL_ID = re.compile(r"call_[A-Za-z0-9]{24}")
# Nothing the client may see: markers, parameter markup, internal names.
FORBIDDEN = (
    "<|",
    "|>",
    "<rfl:parameter",
    "</rfl:parameter",
    "rfl:",
    "LEAKED",
    "model_eos",
    "MODEL_EOS",
    "eos_text",
    "End",
    "grammar",
    "VISIBLE_STOP",
    "TRANSPORT_EOF",
)


def P(key: str, value: str) -> str:
    return f'<rfl:parameter name="{key}">{value}</rfl:parameter>'


class IdOf(str):
    """Placeholder: the token id of this token text (resolved with POST /tokenize)."""


class CountOf(str):
    """Placeholder: the number of tokens of this text (resolved with POST /tokenize)."""


# -- expected results --------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Message:
    """One choice as the client sees it (non-streaming `content` semantics)."""

    content: str | None = ""
    reasoning: str | None = None
    calls: tuple[Call, ...] = ()
    finish: str = "stop"
    stop_reason: Any = None


@dataclass(frozen=True)
class Failed:
    """A request error: 500 non-streaming, an SSE error event streaming."""


ERROR = Failed()
Expected = Message | Failed


def paris(**kw: Any) -> Message:
    return Message(content=None, calls=(Call(TOOL, {"city": "Paris"}),), finish="tool_calls", **kw)


@dataclass(frozen=True)
class Case:
    id: str
    output: str | list[str]
    end: str
    expect: Expected | tuple[Expected, ...]
    grammar: bool = True
    request: dict[str, Any] = field(default_factory=dict)
    tokens_per_step: int = 1


B3_TEXT = HEADER + P("city", "Paris")
B7_TEXT = ANALYSIS + LATER + HEADER + '<rfl:parameter name="city">Par'
B7 = Message(content="", reasoning="Need the weather.", finish="length")
B11_TEXT = HEADER + P("city", "Paris") + "<|end|>" + LATER + HEADER + P("city", "Rome")
TWO_CALLS = (Call(TOOL, {"city": "Paris"}), Call(TOOL, {"city": "Rome"}))
B13_TEXT = (
    ANALYSIS
    + LATER
    + HEADER
    + P("city", "Paris")
    + "<|end|>"
    + LATER
    + HEADER
    + P("city", "Rome")
    + "<|end|>"
    + LATER
    + "<|channel|>final<|message|>All ready."
    + RETURN
    + TAIL  # the engine keeps sending after the EOS
)
B13 = Message(
    content="All ready.", reasoning="Need the weather.", calls=TWO_CALLS, finish="tool_calls"
)
# ` Montréal ` is one token of the test tokenizer; in `café` the `é` is two byte
# tokens, so with tokens_per_step 1 the character is split across engine outputs.
SPLIT_VALUE = " Montréal café "
B17_PREFIX = "<|channel|>final<|message|>Hi." + RETURN + LATER + "<|channel|>final<|message|>Bye."

CASES = [
    Case(
        "B1",
        "<|channel|>analysis<|message|>r<|end|><|channel|>final<|message|>Hi",
        "eos",
        Message(content="Hi", reasoning="r"),
    ),
    Case("B2", B3_TEXT + "<|call|>" + TAIL, "eos", paris()),
    Case("B3", B3_TEXT, "eos", paris()),
    Case("B4", B3_TEXT, "eos", paris(), grammar=False),
    Case("B5", B3_TEXT, "eof", paris()),
    Case("B6", B3_TEXT, "length", replace(paris(), finish="length")),
    Case("B7", B7_TEXT, "length", B7),
    Case("B8", HEADER + '<rfl:parameter name="city">Par', "eos", ERROR),
    Case("B9", HEADER + "junk " + P("city", "Paris"), "eos", ERROR),
    Case("B10", HEADER + P("q", "a") + " b</rfl:parameter>", "eos", ERROR),
    Case("B11", B11_TEXT, "eos", Message(content=None, calls=TWO_CALLS, finish="tool_calls")),
    Case("B12", B3_TEXT + "<|end|>", "eos", paris()),
    Case("B13", B13_TEXT, "eos", B13),
    Case(
        "B14",
        B3_TEXT + "<|call|>" + TAIL,
        "eos",
        Message(content="", stop_reason="Paris"),
        request={"stop": ["Paris"]},
    ),
    Case(
        "B15",
        B3_TEXT,
        "eos",
        paris(stop_reason=IdOf(RETURN)),
        request={"stop_token_ids": [IdOf(RETURN)]},
    ),
    Case("B16", B3_TEXT, "eos", paris(), request={"stop": [RETURN]}),
    Case(
        "B17",
        B17_PREFIX + "<|end|>" + TAIL,
        "eos",
        Message(content="Hi.Bye.", finish="length"),
        request={"ignore_eos": True, "max_tokens": CountOf(B17_PREFIX)},
    ),
    Case("B18", B3_TEXT, "eos_hidden", paris()),
    Case("B19", B3_TEXT, "stop", paris()),
    Case("B20", [B3_TEXT + RETURN + TAIL, B7_TEXT], "length", (paris(), B7), request={"n": 2}),
    Case(
        "B21",
        f" to={TOOL}<|channel|>analysis<|message|>" + P("city", "Paris") + "<|call|>" + TAIL,
        "eos",
        paris(),
    ),
    Case(
        "B22",
        HEADER + P("k", "1") + P("k", "2") + "<|call|>" + TAIL,
        "eos",
        Message(content=None, calls=(Call(TOOL, {"k": "2"}),), finish="tool_calls"),
    ),
    Case(
        "B23",
        HEADER + P("city", " Montréal "),
        "eos",
        Message(content=None, calls=(Call(TOOL, {"city": " Montréal "}),), finish="tool_calls"),
    ),
    Case(
        "B23-split",
        HEADER + P("city", SPLIT_VALUE),
        "eos",
        Message(content=None, calls=(Call(TOOL, {"city": SPLIT_VALUE}),), finish="tool_calls"),
    ),
    Case(
        "B24",
        HEADER + P("days", "2") + "<|call|>" + TAIL,
        "eos",
        Message(content=None, calls=(Call(TOOL, {"days": 2}),), finish="tool_calls"),
    ),
    Case(
        "B25",
        " to=weather.forecast<|channel|>analysis <|constrain|>xml<|message|>" + P("city", "Paris"),
        "eos",
        ERROR,
    ),
]

# Without the grammar the strict cases take the lenient path: no error, broken
# markup dropped, and a call to an undeclared tool is still returned.
LENIENT = [
    Case(
        "B8-no-grammar", HEADER + '<rfl:parameter name="city">Par', "eos", Message(), grammar=False
    ),
    Case("B9-no-grammar", HEADER + "junk " + P("city", "Paris"), "eos", Message(), grammar=False),
    Case(
        "B10-no-grammar",
        HEADER + P("q", "a") + " b</rfl:parameter>",
        "eos",
        Message(),
        grammar=False,
    ),
    Case(
        "B25-no-grammar",
        " to=weather.forecast<|channel|>analysis <|constrain|>xml<|message|>" + P("city", "Paris"),
        "eos",
        Message(
            content=None,
            calls=(Call("weather.forecast", {"city": "Paris"}),),
            finish="tool_calls",
        ),
        grammar=False,
    ),
]

# `tool_choice: "none"`: there is no grammar and nothing may be called: a call
# the model writes anyway is no call. Its arguments, as a JSON object, are
# reasoning (its analysis segment); no markup shows and the choice stops.
NONE = {"tool_choice": "none"}
PARIS_ARGS = '{"city": "Paris"}'
UNCALLED = [
    Case("B3-none", B3_TEXT, "eos", Message(reasoning=PARIS_ARGS), request=NONE),
    Case(
        "B2-none",
        B3_TEXT + "<|call|>" + LATER + "<|channel|>final<|message|>Hi",
        "eos",
        Message(content="Hi", reasoning=PARIS_ARGS),
        request=NONE,
    ),
    Case(
        "B13-none",
        B13_TEXT,
        "eos",
        Message(
            content="All ready.",
            reasoning='Need the weather.{"city": "Paris"}{"city": "Rome"}',
        ),
        request=NONE,
    ),
    Case("B7-none", B7_TEXT, "length", B7, request=NONE),
    Case("B9-none", HEADER + "junk " + P("city", "Paris"), "eos", Message(), request=NONE),
]


# -- servers -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return beam_model(tmp_path_factory.mktemp("beam"))


def _beam_server(model_dir: Path, *extra: str) -> Any:
    return rotor_server(
        "out=mocker",
        "--model-path",
        str(model_dir),
        "--tool-call-parser",
        "beam",
        "--speedup-ratio",
        "0",
        *extra,
    )


@pytest.fixture(scope="module")
def grammar_server(model_dir: Path) -> Iterator[Server]:
    with _beam_server(model_dir) as srv:
        yield srv


@pytest.fixture(scope="module")
def plain_server(model_dir: Path) -> Iterator[Server]:
    with _beam_server(model_dir, "--no-structural-tags") as srv:
        yield srv


@pytest.fixture(scope="module")
def http(grammar_server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


# -- running a case --------------------------------------------------------------------


def tokenize(server: Server, text: str) -> list[int]:
    return server.tokenize(str(text), add_special_tokens=False)


def resolve(value: Any, server: Server) -> Any:
    """Replace IdOf / CountOf placeholders (anywhere in a structure) by numbers."""
    if isinstance(value, IdOf):
        ids = tokenize(server, value)
        assert len(ids) == 1, f"{value!r} is not one token: {ids}"
        return ids[0]
    if isinstance(value, CountOf):
        return len(tokenize(server, value))
    if isinstance(value, dict):
        return {k: resolve(v, server) for k, v in value.items()}
    if isinstance(value, list | tuple):
        out = [resolve(v, server) for v in value]
        return type(value)(out) if isinstance(value, tuple) else out
    if isinstance(value, Message):
        return replace(value, stop_reason=resolve(value.stop_reason, server))
    return value


def body_of(case: Case, stream: bool, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "messages": MESSAGES,
        "tools": TOOLS,
        "stream": stream,
        "mock": {"output": case.output, "end": case.end, "tokens_per_step": case.tokens_per_step},
        **case.request,
        **extra,
    }


def assert_no_leak(raw: str) -> None:
    for bad in FORBIDDEN:
        assert bad not in raw, f"{bad!r} reached the client:\n{raw}"


def check_call(call: dict[str, Any]) -> Call:
    assert CALL_ID.fullmatch(call["id"]), call["id"]
    assert call["type"] == "function"
    fn = call["function"]
    assert isinstance(fn["arguments"], str)
    args = json.loads(fn["arguments"])
    assert isinstance(args, dict)
    return Call(fn["name"], args)


def non_streaming(http: httpx.Client, server: Server, body: dict[str, Any]) -> list[Expected]:
    r = http.post(server.v1 + "/chat/completions", json=body)
    assert_no_leak(r.text)
    if r.status_code != 200:
        assert r.status_code == 500, r.text
        err = r.json()
        assert set(err) == {"error"}
        assert set(err["error"]) == {"message", "type", "param", "code"}
        assert err["error"]["type"] == "server_error"
        assert err["error"]["code"] == 500
        assert isinstance(err["error"]["message"], str) and err["error"]["message"]
        return [ERROR] * body.get("n", 1)
    data = r.json()
    assert data["object"] == "chat.completion"
    out: list[Expected] = []
    for i, choice in enumerate(data["choices"]):
        assert choice["index"] == i
        msg = choice["message"]
        assert msg["role"] == "assistant"
        assert set(msg) <= {"role", "content", "reasoning_content", "tool_calls"}
        calls = tuple(check_call(c) for c in msg.get("tool_calls") or [])
        out.append(
            Message(
                content=msg["content"],
                reasoning=msg.get("reasoning_content"),
                calls=calls,
                finish=choice["finish_reason"],
                stop_reason=choice["stop_reason"],
            )
        )
    return out


def streaming(http: httpx.Client, server: Server, body: dict[str, Any]) -> list[Expected]:
    n = body.get("n", 1)
    with http.stream("POST", server.v1 + "/chat/completions", json=body) as r:
        raw = r.read().decode()
    assert r.status_code == 200, raw
    assert r.headers["content-type"].startswith("text/event-stream")
    assert_no_leak(raw)
    chunks = data_events(raw)

    errors = [c for c in chunks if "error" in c]
    if errors:
        assert len(errors) == 1 and chunks[-1] is errors[0], "the error is the last event"
        err = errors[0]["error"]
        assert err["type"] == "server_error" and err["code"] == 500 and err["message"]
        for c in chunks[:-1]:
            for choice in c["choices"]:
                assert "tool_calls" not in choice["delta"], "a call went out before the error"
                assert choice["finish_reason"] is None
        return [ERROR] * n

    text: list[list[str]] = [[] for _ in range(n)]
    reasoning: list[list[str] | None] = [None] * n
    calls: list[list[Call]] = [[] for _ in range(n)]
    finish: list[tuple[str, Any] | None] = [None] * n
    for c in chunks:
        assert c["object"] == "chat.completion.chunk"
        for choice in c["choices"]:
            i = choice["index"]
            assert finish[i] is None, "a delta after the finishing chunk"
            delta = choice["delta"]
            if "content" in delta:
                text[i].append(delta["content"])
            if "reasoning_content" in delta:
                reasoning[i] = (reasoning[i] or []) + [delta["reasoning_content"]]
            for call in delta.get("tool_calls") or []:
                assert call["index"] == len(calls[i])
                calls[i].append(check_call(call))
            if choice["finish_reason"] is not None:
                assert delta == {}
                finish[i] = (choice["finish_reason"], choice.get("stop_reason"))
    out: list[Expected] = []
    for i in range(n):
        assert finish[i] is not None, f"choice {i} has no finish_reason"
        joined = "".join(text[i])
        out.append(
            Message(
                content=None if not joined and calls[i] else joined,
                reasoning="".join(reasoning[i]) if reasoning[i] is not None else None,
                calls=tuple(calls[i]),
                finish=finish[i][0],
                stop_reason=finish[i][1],
            )
        )
    return out


def targets(case: Case, grammar: Server, plain: Server) -> list[tuple[Server, dict[str, Any]]]:
    if case.grammar:
        return [(grammar, {})]
    return [(grammar, {"turn_grammar": False}), (plain, {})]


def run_both(
    http: httpx.Client, server: Server, case: Case, extra: dict[str, Any]
) -> list[Expected]:
    """Run a case non-streaming and streaming; they must agree."""
    body = resolve(body_of(case, False, extra), server)
    whole = non_streaming(http, server, body)
    streamed = streaming(http, server, {**body, "stream": True})
    assert streamed == whole, f"streaming {streamed} != non-streaming {whole}"
    return whole


@pytest.mark.parametrize("case", CASES + LENIENT + UNCALLED, ids=lambda c: c.id)
def test_beam_case(
    case: Case, http: httpx.Client, grammar_server: Server, plain_server: Server
) -> None:
    for server, extra in targets(case, grammar_server, plain_server):
        expect = case.expect if isinstance(case.expect, tuple) else (case.expect,)
        expected = [resolve(e, server) for e in expect]
        assert run_both(http, server, case, extra) == expected


@pytest.mark.parametrize(
    "case",
    [c for c in CASES + UNCALLED if c.id in ("B3", "B11", "B13", "B13-none")],
    ids=lambda c: c.id,
)
def test_any_chunking_gives_the_same_result(
    case: Case, http: httpx.Client, grammar_server: Server
) -> None:
    results = {
        k: run_both(http, grammar_server, replace(case, tokens_per_step=k), {}) for k in (1, 3, 7)
    }
    assert results[1] == results[3] == results[7] == [case.expect]


def test_b23_value_really_splits_a_character(grammar_server: Server) -> None:
    """B23-split tests what it claims: some token of its value is half of `é`."""
    ids = tokenize(grammar_server, SPLIT_VALUE)
    pieces = [grammar_server.detokenize([t]) for t in ids]
    assert any("\ufffd" in p for p in pieces), pieces


def test_b15_stop_reason_is_the_return_id(grammar_server: Server) -> None:
    """The resolved id is really `<|return|>`'s (not a placeholder that matched by accident)."""
    (rid,) = tokenize(grammar_server, RETURN)
    assert grammar_server.detokenize([rid]) == RETURN
