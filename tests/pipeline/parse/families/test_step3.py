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

EDIT = {
    "edit_file": {
        "type": "object",
        "properties": {
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
            "indent": {"type": "integer"},
            "enabled": {"type": "boolean"},
        },
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
    # vLLM's common cases write the block without its `function<｜tool_sep｜>`
    # header; its streaming parser reads them (tests/tool_parsers/test_step3_tool_parser.py).
    Case(
        "simple_args_without_the_type_header",
        BEGIN + '<｜tool_call_begin｜><steptml:invoke name="get_weather">'
        '<steptml:parameter name="city">Tokyo</steptml:parameter>'
        "</steptml:invoke><｜tool_call_end｜>" + END,
        None,
        [("get_weather", {"city": "Tokyo"})],
    ),
    Case(
        "empty_args_without_the_type_header",
        "Hi " + BEGIN + '<｜tool_call_begin｜><steptml:invoke name="refresh"></steptml:invoke>'
        "<｜tool_call_end｜>" + END,
        "Hi ",
        [("refresh", {})],
    ),
    # The value sits inline between the tags: its whitespace is data. The
    # model may echo the function's name between the separator and the invoke.
    Case(
        "parameter_values_with_whitespace",
        BEGIN + "<｜tool_call_begin｜>function<｜tool_sep｜>edit_file\n"
        '<steptml:invoke name="edit_file">'
        '<steptml:parameter name="old_string">    if x:\n        return 1\n</steptml:parameter>'
        '<steptml:parameter name="new_string">hello\u00a0</steptml:parameter>'
        '<steptml:parameter name="indent"> 4 </steptml:parameter>'
        '<steptml:parameter name="enabled"> true </steptml:parameter>'
        "</steptml:invoke><｜tool_call_end｜>" + END,
        None,
        [
            (
                "edit_file",
                {
                    "old_string": "    if x:\n        return 1\n",
                    "new_string": "hello\u00a0",
                    "indent": 4,
                    "enabled": True,
                },
            )
        ],
        tools=EDIT,
    ),
    Case(
        "malformed_prose_before_the_invoke_is_content",
        "Hi " + BEGIN + "<｜tool_call_begin｜>function<｜tool_sep｜>I will edit it\n"
        '<steptml:invoke name="f"></steptml:invoke><｜tool_call_end｜>' + END,
        "Hi " + BEGIN + "<｜tool_call_begin｜>function<｜tool_sep｜>I will edit it\n"
        '<steptml:invoke name="f"></steptml:invoke><｜tool_call_end｜>' + END,
    ),
    Case(
        "malformed_two_invokes_in_one_block_is_content",
        BEGIN + '<｜tool_call_begin｜><steptml:invoke name="f"></steptml:invoke>'
        '<steptml:invoke name="g"></steptml:invoke><｜tool_call_end｜>' + END,
        BEGIN + '<｜tool_call_begin｜><steptml:invoke name="f"></steptml:invoke>'
        '<steptml:invoke name="g"></steptml:invoke><｜tool_call_end｜>' + END,
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
