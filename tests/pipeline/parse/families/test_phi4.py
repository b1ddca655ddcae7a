"""phi4, from its format: `functools[{"name", "arguments"}, ...]`, one JSON
list for all calls, no closing marker; `functools` itself is plain text."""

from __future__ import annotations

from rotor.pipeline.parse.base import Content, Tools
from rotor.pipeline.parse.tools import tool_parser

from support.parsing import Case, family_tests

FAMILY = "phi4"

CASES = [
    Case(
        "one_call",
        'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "parallel",
        'functools[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": [1, 2]}}]',
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "text_before_and_after",
        'I will check.\nfunctools[{"name": "f", "arguments": {}}]\nDone.',
        "I will check.\n\nDone.",
        [("f", {})],
    ),
    Case(
        "nested_unicode",
        'functools[{"name": "f", "arguments": {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, "s": "] }"}}]',
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, "s": "] }"})],
    ),
    Case("empty_args", 'functools[{"name": "ping", "arguments": {}}]', None, [("ping", {})]),
    Case(
        "parameters_key_and_space_before_list",
        'functools [{"name": "f", "parameters": {"a": 1.0}}]',
        None,
        [("f", {"a": 1.0})],
    ),
    Case(
        "functools_in_prose_is_content",
        "import functools\nfunctools.partial(f, 1) and functools",
        "import functools\nfunctools.partial(f, 1) and functools",
    ),
    Case(
        "malformed_json_is_content",
        'functools[{"name": f}] after',
        'functools[{"name": f}] after',
    ),
    Case("list_of_non_calls_is_content", "functools[1, 2] ok", "functools[1, 2] ok"),
    Case("empty_list_is_content", "functools[]", "functools[]"),
    Case(
        "cut_off_incomplete_is_content",
        'Sure functools[{"name": "f", "argu',
        'Sure functools[{"name": "f", "argu',
    ),
    Case("plain_text", "Just text about func", "Just text about func"),
    Case(
        "undeclared_name_still_returned",
        'functools[{"name": "other", "arguments": {"k": true}}]',
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(family_tests(FAMILY, CASES, fast_path="no markup here, just words"))


def test_calls_are_sent_when_the_list_closes() -> None:
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    assert parser.feed('functools[{"name": "f", "arguments": {}}') == []
    pieces = parser.feed("] ok")
    assert [p.name for p in pieces if not isinstance(p, Content)] == ["f"]
    assert pieces[-1] == Content(" ok")


def test_functools_is_plain_text() -> None:
    assert not tool_parser(FAMILY).needs_special_tokens


def test_functools_before_anything_but_a_list_is_prose_at_once() -> None:
    """`functools{` opens no call: the text streams on instead of being held
    until some brace closes (or the stream ends)."""
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    text = "functools{ is not how phi4 opens calls, so this streams"
    pieces = parser.feed(text)
    assert all(isinstance(p, Content) for p in pieces)
    assert "".join(p.text for p in pieces if isinstance(p, Content)) == text
    # A real call still follows.
    pieces = parser.feed(' functools[{"name": "f", "arguments": {}}]') + parser.finish()
    assert [p.name for p in pieces if not isinstance(p, Content)] == ["f"]
