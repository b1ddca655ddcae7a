"""hermes, from its format: one `<tool_call>` JSON object per call."""

from __future__ import annotations

from support.parsing import Case, check_case, family_tests

FAMILY = "hermes"

CASES = [
    Case(
        "one_call",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "parallel",
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {"y": [1, 2]}}</tool_call>',
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "text_around",
        'Let me check.\n<tool_call>{"name": "f", "arguments": {}}</tool_call>\nDone.',
        "Let me check.\n\nDone.",
        [("f", {})],
    ),
    Case(
        "nested_unicode",
        '<tool_call>{"name": "f", "arguments": {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}}}</tool_call>',
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}})],
    ),
    Case(
        "empty_args_parameters_key",
        '<tool_call>{"name": "ping", "parameters": {}}</tool_call>',
        None,
        [("ping", {})],
    ),
    Case(
        "malformed_is_content",
        "<tool_call>{not json}</tool_call> after",
        "<tool_call>{not json}</tool_call> after",
    ),
    Case(
        "cut_off_incomplete_is_content",
        'Sure <tool_call>{"name": "f", "argu',
        'Sure <tool_call>{"name": "f", "argu',
    ),
    Case(
        "cut_off_complete_body_recovered",
        '<tool_call>{"name": "f", "arguments": {"a": "b"}}',
        None,
        [("f", {"a": "b"})],
    ),
    Case("plain_text", "Just text with a < sign and <tool", "Just text with a < sign and <tool"),
    Case(
        "undeclared_name_still_returned",
        '<tool_call>{"name": "other", "arguments": {"k": true}}</tool_call>',
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(family_tests(FAMILY, CASES))


def test_complete_call_cut_off_inside_its_end_marker_is_recovered() -> None:
    """A half-written `</tool_call>` at the end of the stream says nothing
    about the call before it: the call goes out, the marker piece is dropped."""
    check_case(
        FAMILY,
        Case(
            "cut_off_inside_end_marker",
            'Sure <tool_call>{"name": "f", "arguments": {"a": "b"}}</tool_',
            "Sure ",
            [("f", {"a": "b"})],
        ),
    )
