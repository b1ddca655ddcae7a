"""llama3_json, from its format: a JSON object `{"name", "parameters"}` at the
head of the output (optionally after `<|python_tag|>`), parallel calls joined
by `;`. A `{` that is not a call, or that sits inside prose, is content."""

from __future__ import annotations

from rotor.pipeline.parse.base import Content, ToolCall, Tools
from rotor.pipeline.parse.tools import tool_parser

from support.parsing import Case, family_tests

FAMILY = "llama3_json"
TAG = "<|python_tag|>"

CASES = [
    Case(
        "one_call",
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "python_tag_one_call",
        TAG + '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "parallel_semicolon",
        '{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {"y": [1, 2]}}',
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "parallel_after_tag_no_space",
        TAG + '{"name": "a", "parameters": {}};{"name": "b", "parameters": {}};'
        '{"name": "c", "parameters": {}}',
        None,
        [("a", {}), ("b", {}), ("c", {})],
    ),
    Case(
        "parallel_one_per_line",
        '{"name": "a", "parameters": {}}\n{"name": "b", "parameters": {}}',
        None,
        [("a", {}), ("b", {})],
    ),
    Case(
        "arguments_key",
        '{"name": "f", "arguments": {"q": "x"}}',
        None,
        [("f", {"q": "x"})],
    ),
    Case(
        "leading_whitespace",
        '\n\n  {"name": "f", "parameters": {"a": true}}\n',
        None,
        [("f", {"a": True})],
    ),
    Case(
        "text_before_tag_and_after",
        'Let me check.\n<|python_tag|>{"name": "f", "parameters": {}}\nDone.',
        "Let me check.\n\nDone.",
        [("f", {})],
    ),
    Case(
        "text_after_call",
        '{"name": "f", "parameters": {}}\n\nThat is all.',
        "\n\nThat is all.",
        [("f", {})],
    ),
    Case(
        "nested_unicode",
        '{"name": "f", "parameters": {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, '
        '"s": "a } b ; c"}}',
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, "s": "a } b ; c"})],
    ),
    Case("empty_parameters", '{"name": "ping", "parameters": {}}', None, [("ping", {})]),
    Case("no_parameters_at_all", '{"name": "ping"}', None, [("ping", {})]),
    Case(
        "parameters_as_json_string",
        '{"name": "f", "parameters": "{\\"a\\": 1}"}',
        None,
        [("f", {"a": 1})],
    ),
    Case(
        "json_that_is_not_a_call_is_content",
        '{"answer": 42, "items": [1, 2]} is the result',
        '{"answer": 42, "items": [1, 2]} is the result',
    ),
    Case("empty_object_is_content", "{}", "{}"),
    Case(
        "brace_that_is_not_json_is_content",
        "{ this is a set of words }",
        "{ this is a set of words }",
    ),
    Case(
        "call_inside_prose_is_content",
        'The call {"name": "f", "parameters": {}} was made.',
        'The call {"name": "f", "parameters": {}} was made.',
    ),
    Case(
        "malformed_json_is_content",
        '{"name": "f", "parameters": {"a": }} after',
        '{"name": "f", "parameters": {"a": }} after',
    ),
    Case(
        "malformed_second_call_is_content",
        '{"name": "f", "parameters": {}}; {"name": "g", "parameters": nope}',
        '; {"name": "g", "parameters": nope}',
        [("f", {})],
    ),
    Case(
        "tagged_code_is_content",
        TAG + 'brave_search.call(query="rotor")',
        TAG + 'brave_search.call(query="rotor")',
    ),
    Case(
        "cut_off_incomplete_is_content",
        '{"name": "f", "parameters": {"a": "b',
        '{"name": "f", "parameters": {"a": "b',
    ),
    Case(
        "cut_off_after_tag_is_content",
        'Sure <|python_tag|>{"name": "f", "par',
        'Sure <|python_tag|>{"name": "f", "par',
    ),
    Case("cut_off_right_after_tag_is_content", TAG, TAG),
    Case(
        "cut_off_after_separator_keeps_first_call",
        '{"name": "f", "parameters": {"a": "b"}}; ',
        "; ",
        [("f", {"a": "b"})],
    ),
    Case(
        "plain_text", "Just text with a < sign and <|python", "Just text with a < sign and <|python"
    ),
    Case(
        "undeclared_name_still_returned",
        '{"name": "other", "parameters": {"k": true}}',
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(family_tests(FAMILY, CASES))


def test_prose_streams_at_once() -> None:
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    assert parser.feed("Sure, ") == [Content("Sure, ")]
    assert parser.feed("a {brace} here") == [Content("a {brace} here")]


def test_leading_brace_is_held_until_known() -> None:
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    assert parser.feed("  ") == []
    assert parser.feed("{") == [Content("  ")]
    assert parser.feed('"name": "f", ') == []
    pieces = parser.feed('"parameters": {"a": 1}}')
    assert [(p.name, p.arguments) for p in pieces if isinstance(p, ToolCall)] == [("f", '{"a": 1}')]
    assert len(pieces) == 1


def test_leading_brace_of_prose_is_released_without_waiting() -> None:
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    assert parser.feed("{") == []
    assert parser.feed(" 42") == [Content("{ 42")]


def test_each_call_is_sent_when_its_object_closes() -> None:
    parser = tool_parser(FAMILY)(Tools({"a": {}, "b": {}}))
    first = parser.feed('{"name": "a", "parameters": {}}; {"name": "b", ')
    assert [(p.name, p.arguments) for p in first if isinstance(p, ToolCall)] == [("a", "{}")]
    rest = parser.feed('"parameters": {}}') + parser.finish()
    assert [p.name for p in rest if isinstance(p, ToolCall)] == ["b"]


def test_python_tag_is_a_special_token() -> None:
    assert tool_parser(FAMILY).needs_special_tokens
