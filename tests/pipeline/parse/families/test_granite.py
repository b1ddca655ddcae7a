"""granite, from its format: `<|tool_call|>` (or the plain `<tool_call>`) then a
JSON list of calls; no end marker, the list itself ends the section."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.pipeline.parse.base import Content, ToolCall, Tools
from rotor.pipeline.parse.jsonutil import JsonValueEnd, json_value_end
from rotor.pipeline.parse.tools import tool_parser

from support.parsing import Case, family_tests, splits

FAMILY = "granite"

START = "<|tool_call|>"

CASES = [
    Case(
        "one_call",
        START + '[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "parallel_in_one_list",
        START + '[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": [1, 2]}}]',
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "arguments_before_name",
        START + '[{"arguments": {"city": "Paris"}, "name": "get_weather"}]',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "plain_string_start_marker",
        '<tool_call> [{"name": "f", "arguments": {"a": 1}}]',
        None,
        [("f", {"a": 1})],
    ),
    Case(
        "text_around",
        'Let me check.\n<|tool_call|>[{"name": "f", "arguments": {}}]\nDone.',
        "Let me check.\n\nDone.",
        [("f", {})],
    ),
    Case(
        "brackets_inside_strings",
        START + '[{"name": "f", "arguments": {"s": "a ] } [ {", "t": "\\"]"}}] tail',
        " tail",
        [("f", {"s": "a ] } [ {", "t": '"]'})],
    ),
    Case(
        "nested_unicode",
        START + '[{"name": "f", "arguments": {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}}}]',
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}})],
    ),
    Case(
        "empty_args_parameters_key",
        START + '[{"name": "ping", "parameters": {}}]',
        None,
        [("ping", {})],
    ),
    Case(
        "bare_object_is_one_call",
        START + '{"name": "f", "arguments": {"a": 1}}',
        None,
        [("f", {"a": 1})],
    ),
    Case(
        "two_sections",
        START + '[{"name": "a", "arguments": {}}]\n' + START + '[{"name": "b", "arguments": {}}]',
        None,
        [("a", {}), ("b", {})],
    ),
    Case(
        "malformed_is_content",
        "Hi " + START + "[{not json}] after",
        "Hi " + START + "[{not json}] after",
    ),
    Case(
        "marker_in_prose_is_content",
        "Wrap calls in <tool_call> tags, like this.",
        "Wrap calls in <tool_call> tags, like this.",
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure " + START + '[{"name": "f", "argu',
        "Sure " + START + '[{"name": "f", "argu',
    ),
    Case("cut_off_after_marker_is_content", "Sure " + START + "  ", "Sure " + START + "  "),
    Case("plain_text", "Just text with a < sign and <|tool", "Just text with a < sign and <|tool"),
    Case(
        "undeclared_name_still_returned",
        START + '[{"name": "other", "arguments": {"k": true}}]',
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)


def test_call_is_released_when_its_list_closes() -> None:
    """No end marker to wait for: the call goes out with the closing bracket,
    not at the end of the stream, and the text after it streams on."""
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    long_args = '{"a": "' + "x" * 40 + '"}'
    assert parser.feed(START + '[{"name": "f", "arguments": ' + long_args + "}") == []
    pieces = parser.feed("] then")
    assert [type(p) for p in pieces] == [ToolCall, Content]
    assert pieces[1] == Content(" then")
    # A second, shorter section is watched afresh, not from where the first ended.
    pieces = parser.feed(START + '[{"name": "f", "arguments": {}}] again')
    assert [type(p) for p in pieces] == [ToolCall, Content]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\[]{} é🙂', max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet='k"]}\\', max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    value=st.lists(_json, max_size=3) | st.dictionaries(st.text(max_size=3), _json, max_size=3),
    lead=st.sampled_from(["", " ", "\n "]),
    tail=st.text(alphabet='x]}"[ ', max_size=6),
)
def test_value_end_fed_in_pieces_agrees_with_json_value_end(
    data: st.DataObject, value: object, lead: str, tail: str
) -> None:
    """The streaming end finder reports the end json_value_end finds in the
    whole text, at the feed that completes the value and never before."""
    text = lead + json.dumps(value, ensure_ascii=False) + tail
    expected = json_value_end(text)
    assert expected == len(text) - len(tail)
    finder, buf, found = JsonValueEnd(), "", None
    for chunk in data.draw(splits(text)):
        buf += chunk
        found = finder.find(buf)
        if found is not None:
            break
        assert len(buf) < expected
    assert found == (expected, expected)


def test_a_wrong_closing_bracket_ends_the_section_as_content() -> None:
    finder = JsonValueEnd()
    assert finder.find('[{"a": 1]') == (9, 9)
    assert tool_parser(FAMILY)(Tools()).parse_section('[{"a": 1]') is None
