"""gigachat3, from its format (GigaChat 3 / 3.1 templates as vLLM's and
SGLang's parsers read them): one JSON call after `function call<|role_sep|>`
(3) or `<|function_call|>` (3.1), no end marker."""

from __future__ import annotations

from support.parsing import Case, family_tests

FAMILY = "gigachat3"
HEADER = "<|message_sep|>\n\nfunction call<|role_sep|>\n"
V31 = "<|function_call|>"

CASES = [
    Case(
        "one_call",
        HEADER + '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "gigachat31_marker",
        V31 + '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "text_before",
        "Let me check." + HEADER + '{"name": "f", "arguments": {}}',
        "Let me check.",
        [("f", {})],
    ),
    Case(
        "header_without_separator",
        "function call<|role_sep|>\n" + '{"name": "f", "arguments": {"a": 1}}',
        None,
        [("f", {"a": 1})],
    ),
    Case(
        "nested_unicode",
        HEADER + '{"name": "f", "arguments": {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}}}',
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}})],
    ),
    Case("empty_args", V31 + '{"name": "ping", "arguments": {}}', None, [("ping", {})]),
    Case(
        "malformed_json_is_content",
        "Hi" + HEADER + '{"name": "f", "arguments": {oops}}',
        "Hi" + HEADER + '{"name": "f", "arguments": {oops}}',
    ),
    # vLLM's and SGLang's parsers take an object as a call only when it has
    # `arguments` and they are an object (gigachat3_tool_parser.py,
    # gigachat3_detector.py); it stays the text the model wrote.
    Case(
        "missing_arguments_is_content",
        "Let me check." + HEADER + '{"name": "get_weather"}',
        "Let me check." + HEADER + '{"name": "get_weather"}',
    ),
    Case(
        "missing_arguments_gigachat31_is_content_text_after_kept",
        V31 + '{"name": "get_weather"} and more',
        V31 + '{"name": "get_weather"} and more',
    ),
    Case(
        "arguments_not_an_object_is_content",
        V31 + '{"name": "f", "arguments": "{\\"a\\": 1}"}',
        V31 + '{"name": "f", "arguments": "{\\"a\\": 1}"}',
    ),
    Case(
        "null_arguments_is_content",
        V31 + '{"name": "f", "arguments": null}',
        V31 + '{"name": "f", "arguments": null}',
    ),
    Case(
        "parameters_key_read_as_arguments",
        V31 + '{"name": "f", "parameters": {"a": 1}}',
        None,
        [("f", {"a": 1})],
    ),
    Case(
        "list_is_content",
        V31 + '[{"name": "f", "arguments": {}}]',
        V31 + '[{"name": "f", "arguments": {}}]',
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure" + HEADER + '{"name": "f", "argu',
        "Sure" + HEADER + '{"name": "f", "argu',
    ),
    Case(
        "plain_text",
        "a function call without header and <|message",
        "a function call without header and <|message",
    ),
    Case(
        "undeclared_name_still_returned",
        V31 + '{"name": "other", "arguments": {"k": true}}',
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)
