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
