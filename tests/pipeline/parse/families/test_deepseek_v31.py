"""deepseek_v31, from its format: one calls section of call blocks, each the
name, the separator and the raw JSON arguments; nothing between blocks."""

from __future__ import annotations

from support.parsing import Case, family_tests

FAMILY = "deepseek_v31"

BEGIN = "<｜tool▁calls▁begin｜>"
END = "<｜tool▁calls▁end｜>"


def block(name: str, args: str) -> str:
    """One call block exactly as DeepSeek V3.1's template writes it."""
    return f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"


CASES = [
    Case(
        "one_call",
        BEGIN + block("get_weather", '{"city": "Paris"}') + END,
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "parallel_in_one_section",
        BEGIN + block("a", '{"x": 1}') + block("b", '{"y": [1, 2]}') + END,
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "text_around",
        "Let me check.\n" + BEGIN + block("f", "{}") + END + "\nDone.",
        "Let me check.\n\nDone.",
        [("f", {})],
    ),
    Case(
        "nested_unicode",
        BEGIN + block("f", '{"q": {"city": "Montréal", "tags": ["東京", "🙂"]}}') + END,
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}})],
    ),
    Case("empty_args", BEGIN + block("ping", "{}") + END, None, [("ping", {})]),
    Case(
        "malformed_json_is_content",
        "Hi " + BEGIN + block("f", "{not json}") + END + " after",
        "Hi " + BEGIN + block("f", "{not json}") + END + " after",
    ),
    Case(
        "arguments_not_an_object_is_content",
        BEGIN + block("f", "[1, 2]") + END,
        BEGIN + block("f", "[1, 2]") + END,
    ),
    Case(
        "v3_style_fence_is_not_this_family",
        BEGIN
        + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>"
        + END,
        BEGIN
        + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>"
        + END,
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure " + BEGIN + '<｜tool▁call▁begin｜>f<｜tool▁sep｜>{"a',
        "Sure " + BEGIN + '<｜tool▁call▁begin｜>f<｜tool▁sep｜>{"a',
    ),
    Case(
        "cut_off_complete_body_recovered",
        BEGIN + block("f", '{"a": "b"}') + block("g", "{}"),
        None,
        [("f", {"a": "b"}), ("g", {})],
    ),
    Case(
        "cut_off_before_call_end_recovered",
        BEGIN + '<｜tool▁call▁begin｜>f<｜tool▁sep｜>{"a": 1}<｜tool▁call',
        None,
        [("f", {"a": 1})],
    ),
    Case(
        "plain_text", "Just text with a < sign and <｜tool", "Just text with a < sign and <｜tool"
    ),
    Case(
        "undeclared_name_still_returned",
        BEGIN + block("other", '{"k": true}') + END,
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)
