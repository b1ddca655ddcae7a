"""internlm, from its format: `<|action_start|><|plugin|>`, a newline, one JSON
object with `name` and `parameters`, then `<|action_end|>`."""

from __future__ import annotations

from support.parsing import Case, check_case, family_tests

FAMILY = "internlm"

START = "<|action_start|><|plugin|>\n"
END = "<|action_end|>"

CASES = [
    Case(
        "one_call",
        START + '{"name": "get_weather", "parameters": {"city": "Paris"}}' + END,
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "two_actions",
        START
        + '{"name": "a", "parameters": {"x": 1}}'
        + END
        + "\n"
        + START
        + '{"name": "b", "parameters": {"y": [1, 2]}}'
        + END,
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "text_around",
        "I will look it up.\n" + START + '{"name": "f", "parameters": {}}' + END + "\nDone.",
        "I will look it up.\n\nDone.",
        [("f", {})],
    ),
    Case(
        "nested_unicode",
        START
        + '{"name": "f", "parameters": {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}}}'
        + END,
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}})],
    ),
    Case(
        "empty_args_arguments_key",
        START + '{"name": "ping", "arguments": {}}' + END,
        None,
        [("ping", {})],
    ),
    Case(
        "malformed_is_content",
        "Hi " + START + "{not json}" + END + " after",
        "Hi " + START + "{not json}" + END + " after",
    ),
    Case(
        "interpreter_action_is_content",
        "Run it:<|action_start|><|interpreter|>\nprint(1)" + END,
        "Run it:<|action_start|><|interpreter|>\nprint(1)" + END,
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure " + START + '{"name": "f", "param',
        "Sure " + START + '{"name": "f", "param',
    ),
    Case(
        "cut_off_complete_body_recovered",
        START + '{"name": "f", "parameters": {"a": "b"}}',
        None,
        [("f", {"a": "b"})],
    ),
    Case(
        "plain_text", "Just text with a < sign and <|action", "Just text with a < sign and <|action"
    ),
    Case(
        "undeclared_name_still_returned",
        START + '{"name": "other", "parameters": {"k": true}}' + END,
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)


def test_complete_call_cut_off_inside_its_end_marker_is_recovered() -> None:
    check_case(
        FAMILY,
        Case(
            "cut_off_inside_end_marker",
            START + '{"name": "f", "parameters": {"a": 1}}<|action_',
            None,
            [("f", {"a": 1})],
        ),
    )
