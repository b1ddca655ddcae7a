"""step3, from its format (Step-3's template as SGLang's and vLLM's parsers
read it): a calls section of blocks, each `function<｜tool_sep｜>` and one
`<steptml:invoke>` with `<steptml:parameter>` values typed by the schema."""

from __future__ import annotations

from support.parsing import Case, family_tests

FAMILY = "step3"
BEGIN, END = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"


def block(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f'<steptml:parameter name="{k}">{v}</steptml:parameter>\n' for k, v in params)
    return (
        f'<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="{name}">\n'
        f"{body}</steptml:invoke><｜tool_call_end｜>"
    )


SEARCH = {
    "search": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    }
}

CASES = [
    Case(
        "one_call_typed_by_schema",
        BEGIN + "\n" + block("search", ("query", "rust programming"), ("limit", "10")) + "\n" + END,
        None,
        [("search", {"query": "rust programming", "limit": 10})],
        tools=SEARCH,
    ),
    Case(
        "parallel",
        BEGIN + block("search", ("query", "a")) + "\n" + block("search", ("query", "b")) + END,
        None,
        [("search", {"query": "a"}), ("search", {"query": "b"})],
        tools=SEARCH,
    ),
    Case(
        "text_around",
        "Let me help you.\n" + BEGIN + block("f", ("q", "x")) + END + "\nHere are the results...",
        "Let me help you.\n\nHere are the results...",
        [("f", {"q": "x"})],
    ),
    Case(
        "nested_unicode",
        BEGIN
        + block("f", ("q", '{"city": "Montréal", "tags": ["東京", "🙂"]}'), ("s", "☕"))
        + END,
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, "s": "☕"})],
        tools={"f": {"properties": {"q": {"type": "object"}, "s": {"type": "string"}}}},
    ),
    Case("empty_args", BEGIN + block("ping") + END, None, [("ping", {})]),
    Case(
        "without_schema_values_stay_strings",
        BEGIN + block("f", ("n", "5")) + END,
        None,
        [("f", {"n": "5"})],
    ),
    Case(
        "malformed_missing_sep_is_content",
        "Hi " + BEGIN + '<｜tool_call_begin｜><steptml:invoke name="f"></steptml:invoke>'
        "<｜tool_call_end｜>" + END,
        "Hi " + BEGIN + '<｜tool_call_begin｜><steptml:invoke name="f"></steptml:invoke>'
        "<｜tool_call_end｜>" + END,
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure " + BEGIN + '<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="f">',
        "Sure " + BEGIN + '<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="f">',
    ),
    Case(
        "cut_off_complete_body_recovered",
        BEGIN + block("f", ("a", "b")) + "<｜tool_calls_e",
        None,
        [("f", {"a": "b"})],
    ),
    Case(
        "plain_text", "a ｜ b and <steptml:invoke> and <｜", "a ｜ b and <steptml:invoke> and <｜"
    ),
    Case(
        "undeclared_name_still_returned",
        BEGIN + block("other", ("k", "v")) + END,
        None,
        [("other", {"k": "v"})],
        tools={"declared": {}},
    ),
]


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)
