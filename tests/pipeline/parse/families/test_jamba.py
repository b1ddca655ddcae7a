"""jamba, from its format: `<tool_calls>`, a JSON list of `{"name", "arguments"}`
objects (the parallel calls), then `</tool_calls>`."""

from __future__ import annotations

from support.parsing import Case, check_case, family_tests

FAMILY = "jamba"

START = "<tool_calls>"
END = "</tool_calls>"

CASES = [
    Case(
        "one_call",
        START + '[{"name": "get_weather", "arguments": {"city": "Paris"}}]' + END,
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "parallel_in_one_list",
        START
        + '[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": [1, 2]}}]'
        + END,
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "two_sections",
        START
        + '[{"name": "a", "arguments": {}}]'
        + END
        + "\n"
        + START
        + '[{"name": "b", "arguments": {}}]'
        + END,
        None,
        [("a", {}), ("b", {})],
    ),
    Case(
        "text_around",
        "Let me check.\n" + START + '[{"name": "f", "arguments": {}}]' + END + "\nDone.",
        "Let me check.\n\nDone.",
        [("f", {})],
    ),
    Case(
        "nested_unicode",
        START
        + '[{"name": "f", "arguments": {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}}}]'
        + END,
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}})],
    ),
    Case(
        "empty_args_parameters_key",
        START + '[{"name": "ping", "parameters": {}}]' + END,
        None,
        [("ping", {})],
    ),
    Case(
        "bare_object_is_one_call",
        START + '{"name": "f", "arguments": {"a": 1}}' + END,
        None,
        [("f", {"a": 1})],
    ),
    Case(
        "malformed_is_content",
        "Hi " + START + "[{not json}]" + END + " after",
        "Hi " + START + "[{not json}]" + END + " after",
    ),
    Case(
        "one_bad_item_makes_the_section_content",
        START + '[{"name": "a", "arguments": {}}, {"arguments": {}}]' + END,
        START + '[{"name": "a", "arguments": {}}, {"arguments": {}}]' + END,
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure " + START + '[{"name": "f", "argu',
        "Sure " + START + '[{"name": "f", "argu',
    ),
    Case(
        "cut_off_complete_body_recovered",
        START + '[{"name": "f", "arguments": {"a": "b"}}]',
        None,
        [("f", {"a": "b"})],
    ),
    Case(
        "plain_text", "Just text with a < sign and <tool_c", "Just text with a < sign and <tool_c"
    ),
    Case(
        "undeclared_name_still_returned",
        START + '[{"name": "other", "arguments": {"k": true}}]' + END,
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)


def test_complete_list_cut_off_inside_its_end_marker_is_recovered() -> None:
    check_case(
        FAMILY,
        Case(
            "cut_off_inside_end_marker",
            START
            + '[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]</tool_ca',
            None,
            [("a", {"x": 1}), ("b", {})],
        ),
    )
