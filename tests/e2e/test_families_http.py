"""Every tool-call family's parser cases, replayed through a real `rotor run`
server (mocker engine) over HTTP: non-streaming, and streaming at one and five
tokens per engine step. The cases live in tests/pipeline/parse/families/; here
the model's text goes through the real tokenizer, the engine, the incremental
detokenizer, the parser and the chunk serializer.

Beam is left out: it has its own HTTP tests (its turn grammar changes the rules).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import tokenizers

from rotor.pipeline.parse.base import ToolCall
from rotor.pipeline.parse.tools import TOOL_PARSERS, tool_parser

from support.models import family_model, harmony_model
from support.parsing import (
    FAMILY_MARKERS,
    PLAIN_MARKER_TEXT,
    Case,
    declared_tools,
    parse_chunks,
    parser_markers,
)
from support.server import Server, rotor_server
from support.sse import data_events

CASES_DIR = Path(__file__).resolve().parent.parent / "pipeline" / "parse" / "families"
EOS = "<|eos|>"
CHAT = ("<|im_start|>", "<|im_end|>")
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GENERATED_ID = re.compile(r"call_[A-Za-z0-9]{24}")

FAMILIES = [name for name in TOOL_PARSERS if name != "beam"]

# Harmony under tools: `<|call|>` is a visible stop and `<|return|>` the EOS, so
# a real gpt-oss turn ends at the first of them; what follows is never generated.
HARMONY_CALL, HARMONY_RETURN = "<|call|>", "<|return|>"


def load_cases(family: str) -> list[Case]:
    """The family's module-level CASES (test dirs are not packages: load by path)."""
    name = f"_families_http_cases.test_{family}"
    spec = importlib.util.spec_from_file_location(name, CASES_DIR / f"test_{family}.py")
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses in the module look themselves up here
    spec.loader.exec_module(module)
    return list(module.CASES)


CASES: dict[str, list[Case]] = {family: load_cases(family) for family in FAMILIES}
PARAMS = [
    pytest.param(family, case, id=f"{family}-{case.id}")
    for family in FAMILIES
    for case in CASES[family]
]


def build_model(family: str, root: Path) -> Path:
    if family == "harmony":
        return harmony_model(root)
    markers = FAMILY_MARKERS[family]
    special = tool_parser(family).needs_special_tokens
    return family_model(
        root,
        special_tokens=(EOS, *CHAT, *(markers if special else ())),
        added_tokens=() if special else markers,
        eos_token=EOS,
        template=TEMPLATE,
        name=f"{family}-model",
    )


class FamilyServers:
    """One server per family, started on first use; one alive at a time (the
    cases run family by family), so 16 servers never hold memory together."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.models: dict[str, Path] = {}
        self._family: str | None = None
        self._server: Server | None = None
        self._stack = ExitStack()

    def model(self, family: str) -> Path:
        if family not in self.models:
            self.models[family] = build_model(family, self.root / family)
        return self.models[family]

    def get(self, family: str) -> Server:
        if self._family != family or self._server is None:
            self.close()
            model = self.model(family)
            self._server = self._stack.enter_context(
                rotor_server(
                    "out=mocker",
                    "--model-path",
                    str(model),
                    "--tool-call-parser",
                    family,
                    "--speedup-ratio",
                    "0",
                )
            )
            self._family = family
        return self._server

    def close(self) -> None:
        self._stack.close()
        self._stack = ExitStack()
        self._server = None
        self._family = None


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FamilyServers]:
    holder = FamilyServers(tmp_path_factory.mktemp("families"))
    try:
        yield holder
    finally:
        holder.close()


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


# ---------------------------------------------------------------------------
# What the case expects over HTTP


@dataclass
class Expected:
    content: str | None
    reasoning: str | None
    calls: list[tuple[str, dict[str, Any]]]
    ids: list[str | None]  # an id the model wrote (kimi_k2, mistral), else None: generated


def model_output(family: str, case: Case) -> str:
    """What the server can return: the case's text up to where a real model's turn
    ends (harmony only: the first `<|call|>` kept, the first `<|return|>` dropped)."""
    if family != "harmony":
        return case.output
    out = case.output
    ends = [(out.find(m), m) for m in (HARMONY_CALL, HARMONY_RETURN) if m in out]
    if not ends:
        return out
    at, marker = min(ends)
    return out[: at + len(HARMONY_CALL)] if marker == HARMONY_CALL else out[:at]


def expected(family: str, case: Case) -> Expected:
    """The case's own expectation; for a harmony case cut at its turn's end, the
    same parser's reading of the part that is generated."""
    text = model_output(family, case)
    parsed = parse_chunks(family, [text], declared_tools(case))
    if text == case.output:
        content, reasoning, calls = case.content, case.reasoning, case.calls
        assert parsed.calls == calls, f"{case.id}: the parser no longer agrees with its case"
    else:
        content, reasoning, calls = parsed.content, parsed.reasoning, parsed.calls
    # Ids the model wrote, read by the family parser alone (the message layer
    # gives every other call a fresh `call_…` id).
    family_parser = tool_parser(family)(declared_tools(case))
    pieces = [*family_parser.feed(text), *family_parser.finish()]
    ids = [p.id for p in pieces if isinstance(p, ToolCall)]
    assert len(ids) == len(calls), f"{case.id}: {pieces}"
    return Expected(content, reasoning, calls, ids)


def tools_body(case: Case) -> list[dict[str, Any]]:
    """OpenAI `tools` for the case: its schemas, or each called name with an object schema."""
    if case.tools is not None:
        schemas = case.tools
    else:
        schemas = {name: {"type": "object"} for name, _ in case.calls} or {
            "unused_tool": {"type": "object"}
        }
    return [
        {"type": "function", "function": {"name": name, "parameters": schema or {"type": "object"}}}
        for name, schema in schemas.items()
    ]


def request_body(family: str, case: Case, stream: bool, per_step: int = 1) -> dict[str, Any]:
    return {
        "model": f"{family}-model",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": tools_body(case),
        "stream": stream,
        "mock": {"output": case.output, "tokens_per_step": per_step},
    }


# ---------------------------------------------------------------------------
# One message from a response


@dataclass
class Message:
    content: str | None
    reasoning: str | None
    calls: list[dict[str, Any]]  # OpenAI tool_calls items (without `index`)
    finish_reason: str | None
    content_deltas: list[str]


def from_response(body: dict[str, Any]) -> Message:
    assert body["object"] == "chat.completion", body
    (choice,) = body["choices"]
    msg = choice["message"]
    assert msg["role"] == "assistant"
    return Message(
        msg.get("content"),
        msg.get("reasoning_content"),
        msg.get("tool_calls") or [],
        choice["finish_reason"],
        [msg["content"]] if msg.get("content") else [],
    )


def fold(chunks: list[dict[str, Any]]) -> Message:
    """Streamed deltas folded into one message; each tool call must come whole,
    in one delta, as docs/tool-calling.md says."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finishes: list[str] = []
    first = True
    for chunk in chunks:
        assert "error" not in chunk, chunk
        assert chunk["object"] == "chat.completion.chunk"
        for choice in chunk["choices"]:
            assert choice["index"] == 0
            delta = choice["delta"]
            if first:
                assert delta.get("role") == "assistant", chunk
                first = False
            if delta.get("content"):
                content.append(delta["content"])
            if delta.get("reasoning_content"):
                reasoning.append(delta["reasoning_content"])
            for call in delta.get("tool_calls") or []:
                index = call["index"]
                assert index == len(calls), f"call index {index} out of order: {chunk}"
                assert call["type"] == "function" and call["id"], call
                json.loads(call["function"]["arguments"])  # whole JSON in one delta
                calls[index] = {k: v for k, v in call.items() if k != "index"}
            if choice.get("finish_reason") is not None:
                finishes.append(choice["finish_reason"])
    assert len(finishes) == 1, f"finish_reason carried by {len(finishes)} chunks"
    return Message(
        "".join(content) or None,
        "".join(reasoning) or None,
        [calls[i] for i in sorted(calls)],
        finishes[0],
        content,
    )


def check_message(msg: Message, want: Expected, family: str, case: Case, how: str) -> None:
    where = f"{family}/{case.id} ({how})"
    if want.content is None:
        if want.calls:
            assert msg.content is None, f"{where}: content {msg.content!r}, want null"
        else:
            assert msg.content in (None, ""), f"{where}: content {msg.content!r}"
    else:
        assert msg.content == want.content, f"{where}: content {msg.content!r} != {want.content!r}"
    assert (msg.reasoning or None) == want.reasoning, f"{where}: reasoning {msg.reasoning!r}"
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg.calls]
    assert got == want.calls, f"{where}: calls {got!r} != {want.calls!r}"
    for call, own_id in zip(msg.calls, want.ids, strict=True):
        assert call["type"] == "function", f"{where}: {call}"
        if own_id is not None:
            assert call["id"] == own_id, f"{where}: id {call['id']!r}, the model wrote {own_id!r}"
        else:
            assert GENERATED_ID.fullmatch(call["id"]), f"{where}: id {call['id']!r}"
    want_finish = "tool_calls" if want.calls else "stop"
    assert msg.finish_reason == want_finish, f"{where}: finish_reason {msg.finish_reason!r}"
    # No marker leaks into content where the case's own content has none.
    if want.calls:
        for marker in FAMILY_MARKERS[family]:
            if marker in (want.content or ""):
                continue
            for piece in msg.content_deltas:
                assert marker not in piece, f"{where}: marker {marker!r} in content {piece!r}"


def comparable(msg: Message) -> tuple[Any, ...]:
    """What streaming and non-streaming must share (generated ids differ per request)."""
    calls = [
        (
            c["id"] if not GENERATED_ID.fullmatch(c["id"]) else "generated",
            c["function"]["name"],
            c["function"]["arguments"],
        )
        for c in msg.calls
    ]
    return msg.content or None, msg.reasoning or None, calls, msg.finish_reason


# ---------------------------------------------------------------------------


def test_every_family_but_beam_is_replayed() -> None:
    assert sorted(FAMILY_MARKERS) == sorted(TOOL_PARSERS)
    for family in FAMILIES:
        assert CASES[family], family


@pytest.mark.parametrize("family", sorted(TOOL_PARSERS))
def test_marker_table_covers_the_parser(family: str) -> None:
    """A marker the parser knows and the table does not would not be a token here."""
    known = parser_markers(family)
    # Read from the parser class: none found means its attributes moved, and
    # this test would check nothing.
    assert known or not FAMILY_MARKERS[family], f"{family}: no marker attributes found"
    # Plain text in the family's tokenizer (Granite's `<tool_call>`, GigaChat's
    # "function call"): a marker may be made of it too.
    pieces = (*FAMILY_MARKERS[family], *PLAIN_MARKER_TEXT.get(family, ()))
    missing = sorted(m for m in known if not made_of(m, pieces))
    assert not missing, f"{family}: markers not in the table: {missing}"


def made_of(text: str, tokens: tuple[str, ...]) -> bool:
    """`text` is a run of whole `tokens` (`<|action_start|><|plugin|>` is two)."""
    return not text or any(text.startswith(t) and made_of(text[len(t) :], tokens) for t in tokens)


@pytest.mark.parametrize("family", FAMILIES)
def test_case_text_is_stable_through_the_tokenizer(family: str, servers: FamilyServers) -> None:
    """encode → decode gives back every case's text (byte-level BPE, markers whole)."""
    tok = tokenizers.Tokenizer.from_file(str(servers.model(family) / "tokenizer.json"))
    unstable = [
        case.id
        for case in CASES[family]
        if tok.decode(tok.encode(case.output).ids, skip_special_tokens=False) != case.output
    ]
    assert not unstable, f"{family}: not stable through encode/decode: {unstable}"


@pytest.mark.parametrize(("family", "case"), PARAMS)
def test_case_over_http(
    family: str, case: Case, servers: FamilyServers, http: httpx.Client
) -> None:
    server = servers.get(family)
    want = expected(family, case)
    url = server.v1 + "/chat/completions"

    response = http.post(url, json=request_body(family, case, stream=False))
    assert response.status_code == 200, response.text
    whole = from_response(response.json())
    check_message(whole, want, family, case, "non-streaming")

    for per_step in (1, 5):
        with http.stream("POST", url, json=request_body(family, case, True, per_step)) as resp:
            assert resp.status_code == 200, resp.read()
            assert resp.headers["content-type"].startswith("text/event-stream")
            streamed = fold(data_events(resp))
        check_message(streamed, want, family, case, f"stream, {per_step} tokens/step")
        assert comparable(streamed) == comparable(whole), f"{family}/{case.id}: {per_step}"


def test_harmony_turn_ends_at_the_first_call() -> None:
    """The harmony expectation cut at `<|call|>` / `<|return|>` is what gpt-oss does:
    a parallel case yields its first call, a mid-stream return ends the answer."""
    by_id = {case.id: case for case in CASES["harmony"]}
    parallel = expected("harmony", by_id["parallel"])
    assert [name for name, _ in parallel.calls] == ["a"]
    returned = expected("harmony", by_id["return_mid_stream_is_framing"])
    assert returned.content == "A" and not returned.calls
