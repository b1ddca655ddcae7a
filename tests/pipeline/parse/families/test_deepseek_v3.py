"""deepseek_v3, from its format: one calls section of call blocks, each a type,
the name and the arguments in a ```json fence; blocks separated by a newline."""

from __future__ import annotations

from support.parsing import Case, family_tests

FAMILY = "deepseek_v3"

BEGIN = "<｜tool▁calls▁begin｜>"
END = "<｜tool▁calls▁end｜>"


def block(name: str, args: str, kind: str = "function") -> str:
    """One call block exactly as DeepSeek V3's template writes it."""
    return (
        f"<｜tool▁call▁begin｜>{kind}<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>"
    )


CASES = [
    Case(
        "one_call",
        BEGIN + block("get_weather", '{"city": "Paris"}') + END,
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "parallel_in_one_section",
        BEGIN + block("a", '{"x": 1}') + "\n" + block("b", '{"y": [1, 2]}') + END,
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
    Case(
        "empty_args",
        BEGIN + block("ping", "{}") + END,
        None,
        [("ping", {})],
    ),
    Case(
        "fence_inside_a_string_argument",
        BEGIN + block("write", '{"md": "```py\\nx = 1\\n```"}') + END,
        None,
        [("write", {"md": "```py\nx = 1\n```"})],
    ),
    Case(
        "malformed_json_is_content",
        "Hi " + BEGIN + block("f", "{not json}") + END + " after",
        "Hi " + BEGIN + block("f", "{not json}") + END + " after",
    ),
    Case(
        "text_between_blocks_is_malformed",
        BEGIN + block("a", "{}") + "oops" + block("b", "{}") + END,
        BEGIN + block("a", "{}") + "oops" + block("b", "{}") + END,
    ),
    Case(
        "missing_separator_is_malformed",
        BEGIN + "<｜tool▁call▁begin｜>get_weather\n```json\n{}\n```<｜tool▁call▁end｜>" + END,
        BEGIN + "<｜tool▁call▁begin｜>get_weather\n```json\n{}\n```<｜tool▁call▁end｜>" + END,
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure " + BEGIN + '<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{"a',
        "Sure " + BEGIN + '<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{"a',
    ),
    Case(
        "cut_off_complete_body_recovered",
        BEGIN + block("f", '{"a": "b"}') + "\n" + block("g", "{}"),
        None,
        [("f", {"a": "b"}), ("g", {})],
    ),
    Case(
        "cut_off_inside_end_marker_recovered",
        BEGIN + block("f", '{"a": 1}') + "<｜tool▁calls",
        None,
        [("f", {"a": 1})],
    ),
    Case(
        "cut_off_after_a_complete_call_then_a_partial_one_is_content",
        BEGIN + block("f", "{}") + "\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{",
        BEGIN + block("f", "{}") + "\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{",
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
