"""Shared harness for parser tests: cases written once from a family's format,
run whole, one character at a time and split at random (hypothesis), through
the same MessageParser the pipeline uses. The HTTP tests reuse the cases."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.pipeline.parse.base import Content, Piece, Reasoning, ToolCall, Tools
from rotor.pipeline.parse.message import MessageParser
from rotor.pipeline.parse.reasoning import reasoning_parser
from rotor.pipeline.parse.tools import tool_parser

from support.models import BEAM_SPECIAL, HARMONY_SPECIAL

# Every marker text of a family (start, end and inner markers, from its parser
# file), as the family's tokenizer has them: special tokens when the family says
# `needs_special_tokens`, added tokens otherwise (the HTTP tests build their
# models so). Granite's plain `<tool_call>` stays text, as in Granite.
_DEEPSEEK = (
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
)
FAMILY_MARKERS: dict[str, tuple[str, ...]] = {
    "hermes": ("<tool_call>", "</tool_call>"),
    "llama3_json": ("<|python_tag|>",),
    "mistral": ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
    "pythonic": ("<|python_start|>", "<|python_end|>"),
    "harmony": tuple(t for t in HARMONY_SPECIAL if t not in ("<|startoftext|>", "<|endoftext|>")),
    "beam": BEAM_SPECIAL,
    "deepseek_v3": _DEEPSEEK,
    "deepseek_v31": _DEEPSEEK,
    "qwen3_coder": ("<tool_call>", "</tool_call>"),
    "kimi_k2": (
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_section_begin|>",
        "<|tool_call_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_end|>",
        "<|tool_call_argument_begin|>",
    ),
    "glm45": (
        "<tool_call>",
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
    ),
    "minimax_m2": ("<minimax:tool_call>", "</minimax:tool_call>"),
    "phi4": ("functools",),
    "nemotron_deci": ("<TOOLCALL>", "</TOOLCALL>"),
    "jamba": ("<tool_calls>", "</tool_calls>"),
    "granite": ("<|tool_call|>",),
    "internlm": ("<|action_start|>", "<|plugin|>", "<|interpreter|>", "<|action_end|>"),
    "deepseek_v32": (
        "<｜DSML｜function_calls>",
        "</｜DSML｜function_calls>",
        "<｜DSML｜invoke",
        "</｜DSML｜invoke>",
        "<｜DSML｜parameter",
        "</｜DSML｜parameter>",
    ),
    "deepseek_v4": (
        "<｜DSML｜tool_calls>",
        "</｜DSML｜tool_calls>",
        "<｜DSML｜invoke",
        "</｜DSML｜invoke>",
        "<｜DSML｜parameter",
        "</｜DSML｜parameter>",
    ),
    "seed_oss": ("<seed:tool_call>", "</seed:tool_call>", "<seed:think>", "</seed:think>"),
    "step3": (
        "<｜tool_calls_begin｜>",
        "<｜tool_calls_end｜>",
        "<｜tool_call_begin｜>",
        "<｜tool_call_end｜>",
        "<｜tool_sep｜>",
    ),
    "lfm2": ("<|tool_call_start|>", "<|tool_call_end|>"),
    "gigachat3": ("<|message_sep|>", "<|role_sep|>", "<|function_call|>"),
}
# Marker text that is plain text in the family's tokenizer, not a token.
PLAIN_MARKER_TEXT: dict[str, tuple[str, ...]] = {
    "granite": ("<tool_call>",),
    "gigachat3": ("function call", "\n"),
}

# The parser class attributes that hold marker strings (a string, or a tuple of
# them); any other attribute named `*marker` / `*markers` is read too.
MARKER_ATTRIBUTES = (
    "start_markers",
    "end_marker",
    "end_markers",
    "marker",
    "call_begin",
    "call_end",
    "visible_stop_markers",
)


def parser_markers(family: str) -> set[str]:
    """The marker strings the family's parser class declares, read at test time
    (a missing attribute, or an empty one, is no marker)."""
    cls = tool_parser(family)
    named = {n for k in cls.__mro__ for n in vars(k) if n.endswith(("marker", "markers"))}
    found: set[str] = set()
    for attribute in sorted(set(MARKER_ATTRIBUTES) | named):
        value = getattr(cls, attribute, None)
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, tuple | list | set | frozenset):  # methods are no markers
            found.update(v for v in value if isinstance(v, str))
    found.discard("")
    return found


@dataclass
class Case:
    id: str
    output: str  # what the model wrote
    content: str | None  # expected content (None: no content)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    reasoning: str | None = None
    # name → parameters JSON schema; None declares every called name without a
    # schema; a Tools as it is (Tools.forbidden(): tool_choice "none")
    tools: dict[str, dict[str, Any]] | Tools | None = None


def json_list_cases(start: str, end: str, partial_start: str) -> list[Case]:
    """The cases of a family whose calls are `start`, a JSON list of
    `{"name", "arguments"}` objects (the parallel calls), then `end` (jamba,
    nemotron_deci): one format, one set of cases. `partial_start`: a prefix of
    `start` that plain text may end with."""
    return [
        Case(
            "one_call",
            start + '[{"name": "get_weather", "arguments": {"city": "Paris"}}]' + end,
            None,
            [("get_weather", {"city": "Paris"})],
        ),
        Case(
            "parallel_in_one_list",
            start
            + '[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": [1, 2]}}]'
            + end,
            None,
            [("a", {"x": 1}), ("b", {"y": [1, 2]})],
        ),
        Case(
            "two_sections",
            start
            + '[{"name": "a", "arguments": {}}]'
            + end
            + "\n"
            + start
            + '[{"name": "b", "arguments": {}}]'
            + end,
            None,
            [("a", {}), ("b", {})],
        ),
        Case(
            "text_around",
            "Let me check.\n" + start + '[{"name": "f", "arguments": {}}]' + end + "\nDone.",
            "Let me check.\n\nDone.",
            [("f", {})],
        ),
        Case(
            "nested_unicode",
            start
            + '[{"name": "f", "arguments": {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}}}]'
            + end,
            None,
            [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}})],
        ),
        Case(
            "empty_args_parameters_key",
            start + '[{"name": "ping", "parameters": {}}]' + end,
            None,
            [("ping", {})],
        ),
        Case(
            "bare_object_is_one_call",
            start + '{"name": "f", "arguments": {"a": 1}}' + end,
            None,
            [("f", {"a": 1})],
        ),
        Case(
            "malformed_is_content",
            "Hi " + start + "[{not json}]" + end + " after",
            "Hi " + start + "[{not json}]" + end + " after",
        ),
        Case(
            "one_bad_item_makes_the_section_content",
            start + '[{"name": "a", "arguments": {}}, {"arguments": {}}]' + end,
            start + '[{"name": "a", "arguments": {}}, {"arguments": {}}]' + end,
        ),
        Case(
            "cut_off_incomplete_is_content",
            "Sure " + start + '[{"name": "f", "argu',
            "Sure " + start + '[{"name": "f", "argu',
        ),
        Case(
            "cut_off_complete_body_recovered",
            start + '[{"name": "f", "arguments": {"a": "b"}}]',
            None,
            [("f", {"a": "b"})],
        ),
        Case(
            "plain_text",
            "Just text with a < sign and " + partial_start,
            "Just text with a < sign and " + partial_start,
        ),
        Case(
            "undeclared_name_still_returned",
            start + '[{"name": "other", "arguments": {"k": true}}]' + end,
            None,
            [("other", {"k": True})],
            tools={"declared": {}},
        ),
    ]


# `get_weather` with a `city` string and a `days` integer (JSON Schema's type names)
WEATHER: dict[str, dict[str, Any]] = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    }
}


def call_cases(
    call: Callable[..., str], weather: dict[str, dict[str, Any]] = WEATHER
) -> list[Case]:
    """The cases every family that writes a call as markup around a name and
    `(key, value)` parameters shares (glm45, qwen3_coder, seed_oss): `call(name,
    *pairs)` writes one call as the family does; `weather` declares `get_weather`
    as WEATHER does, by the family's own type names."""
    return [
        Case(
            "one_call_typed_by_schema",
            call("get_weather", ("city", "Paris"), ("days", "3")),
            None,
            [("get_weather", {"city": "Paris", "days": 3})],
            tools=weather,
        ),
        Case(
            "parallel",
            call("get_weather", ("city", "Paris")) + "\n" + call("get_weather", ("city", "Oslo")),
            None,
            [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})],
            tools=weather,
        ),
        Case(
            "text_around",
            "Let me check.\n" + call("f", ("q", "x")) + "\nDone.",
            "Let me check.\n\nDone.",
            [("f", {"q": "x"})],
        ),
        Case(
            "nested_unicode",
            call(
                "f",
                ("q", '{"city": "Montréal", "tags": ["東京", "🙂"]}'),
                ("label", "naïve café ☕"),
            ),
            None,
            [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, "label": "naïve café ☕"})],
            tools={"f": {"properties": {"q": {"type": "object"}, "label": {"type": "string"}}}},
        ),
        Case(
            "undeclared_name_still_returned",
            call("other", ("k", "v")),
            None,
            [("other", {"k": "v"})],
            tools={"declared": {}},
        ),
    ]


@dataclass
class Message:
    content: str | None
    reasoning: str | None
    calls: list[tuple[str, dict[str, Any]]]
    raw_calls: list[ToolCall]


def declared_tools(case: Case) -> Tools:
    if isinstance(case.tools, Tools):
        return case.tools
    if case.tools is not None:
        return Tools(case.tools)
    return Tools({name: {} for name, _ in case.calls} or {"unused_tool": {}})


def make_parser(
    family: str | None, tools: Tools, reasoning: str | None = None, inside: bool = False
) -> MessageParser:
    return MessageParser(
        reasoning=reasoning_parser(reasoning)(inside) if reasoning else None,
        tools=tool_parser(family)(tools) if family else None,
    )


def fold(pieces: list[Piece]) -> Message:
    content = "".join(p.text for p in pieces if isinstance(p, Content))
    reasoning = "".join(p.text for p in pieces if isinstance(p, Reasoning))
    raw = [p for p in pieces if isinstance(p, ToolCall)]
    calls = [(c.name, json.loads(c.arguments)) for c in raw]
    return Message(content or None, reasoning or None, calls, raw)


def parse_chunks(
    family: str | None,
    chunks: list[str],
    tools: Tools,
    reasoning: str | None = None,
    inside: bool = False,
) -> Message:
    parser = make_parser(family, tools, reasoning, inside)
    pieces: list[Piece] = []
    for chunk in chunks:
        pieces.extend(parser.feed(chunk))
    pieces.extend(parser.finish())
    return fold(pieces)


def assert_message(msg: Message, case: Case) -> None:
    assert msg.content == case.content, f"{case.id}: content {msg.content!r} != {case.content!r}"
    assert msg.reasoning == case.reasoning, f"{case.id}: reasoning {msg.reasoning!r}"
    assert msg.calls == case.calls, f"{case.id}: calls {msg.calls!r} != {case.calls!r}"
    for call in msg.raw_calls:
        assert call.id, call
        json.loads(call.arguments)


def check_case(family: str, case: Case, reasoning: str | None = None) -> None:
    """The case whole and one character at a time."""
    tools = declared_tools(case)
    assert_message(parse_chunks(family, [case.output], tools, reasoning), case)
    assert_message(parse_chunks(family, list(case.output), tools, reasoning), case)


@st.composite
def splits(draw: st.DrawFn, text: str) -> list[str]:
    """`text` cut at random places (inside markers and multi-byte-heavy text alike)."""
    if not text:
        return [text]
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=min(len(text), 40)))
    points = sorted(set(cuts) | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:], strict=False)]


def family_tests(
    family: str,
    cases: list[Case],
    *,
    special_tokens: bool | None = None,
    fast_path: str | None = None,
    fast_path_tools: dict[str, dict[str, Any]] | None = None,
    released: tuple[str, str, str] | None = None,
    examples: int = 60,
) -> dict[str, Callable[..., None]]:
    """The tests every family file runs on its `cases`, by the names pytest
    collects; a test module takes them with `globals().update(family_tests(...))`.

    - `test_case[<case id>]`: each case whole and one character at a time.
    - `test_any_split_gives_the_same_message`: `examples` random splits of a case.
    - with `special_tokens` True (False): `test_markers_are_special_tokens`
      (`test_markers_are_plain_text`), the parser's `needs_special_tokens`.
    - with `fast_path`: `test_plain_text_takes_the_fast_path`, that text fed to a
      parser declared `fast_path_tools` (default none) comes back as one piece.
    - with `released` = (partial, breaker, opening):
      `test_text_is_released_once_it_cannot_be_a_marker`: text ending in
      `partial` (a marker's start) is held back, released with `breaker` (which
      makes it no marker), and an `opening` left unfinished is content at the end.
    """

    @pytest.mark.parametrize("case", cases, ids=lambda c: c.id)
    def test_case(case: Case) -> None:
        check_case(family, case)

    def test_any_split_gives_the_same_message(data: st.DataObject, case: Case) -> None:
        chunks = data.draw(splits(case.output))
        assert_message(parse_chunks(family, chunks, declared_tools(case)), case)

    # Its source is the same for every family: keep their hypothesis database keys apart.
    split_test: Any = test_any_split_gives_the_same_message
    split_test._hypothesis_internal_add_digest = family.encode()
    tests: dict[str, Callable[..., None]] = {
        "test_case": test_case,
        "test_any_split_gives_the_same_message": settings(max_examples=examples, deadline=None)(
            given(data=st.data(), case=st.sampled_from(cases))(split_test)
        ),
    }

    if special_tokens is not None:

        def test_special_tokens() -> None:
            needs = tool_parser(family).needs_special_tokens
            assert bool(needs) is special_tokens, f"{family}: needs_special_tokens is {needs!r}"

        name = (
            "test_markers_are_special_tokens" if special_tokens else "test_markers_are_plain_text"
        )
        tests[name] = test_special_tokens

    if fast_path is not None:
        text = fast_path

        def test_plain_text_takes_the_fast_path() -> None:
            parser = tool_parser(family)(Tools(fast_path_tools))
            pieces = parser.feed(text)
            assert pieces == [Content(text)], f"{family}: {pieces!r}"

        tests["test_plain_text_takes_the_fast_path"] = test_plain_text_takes_the_fast_path

    if released is not None:
        partial, breaker, opening = released

        def test_text_is_released_once_it_cannot_be_a_marker() -> None:
            parser = tool_parser(family)(Tools({"f": {}}))
            assert parser.feed("Hi " + partial) == [Content("Hi ")]
            assert parser.feed(breaker) == [Content(partial + breaker)]
            assert parser.feed(" " + opening) == [Content(" ")]
            assert parser.finish() == [Content(opening)]

        tests["test_text_is_released_once_it_cannot_be_a_marker"] = (
            test_text_is_released_once_it_cannot_be_a_marker
        )

    for name, test in tests.items():
        test.__name__ = test.__qualname__ = name
    return tests
