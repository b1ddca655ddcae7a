"""lfm2, from its format (LFM2's chat template, vLLM's and SGLang's parsers): a
Python list of calls between `<|tool_call_start|>` and `<|tool_call_end|>`, or
JSON calls between the same markers."""

from __future__ import annotations

from support.parsing import Case, family_tests

FAMILY = "lfm2"
BEGIN, END = "<|tool_call_start|>", "<|tool_call_end|>"

CASES = [
    Case(
        "one_call",
        BEGIN + '[get_weather(location="Paris")]' + END + "The weather in Paris is sunny.",
        "The weather in Paris is sunny.",
        [("get_weather", {"location": "Paris"})],
    ),
    Case(
        "parallel",
        BEGIN + "[a(x=1), b(y=[1, 2], z=None)]" + END,
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2], "z": None})],
    ),
    Case(
        "text_around",
        "Let me check.\n" + BEGIN + "[f()]" + END + "\nDone.",
        "Let me check.\n\nDone.",
        [("f", {})],
    ),
    Case(
        "nested_unicode",
        BEGIN + "[f(q={'city': 'Montréal', 'tags': ['東京', '🙂']}, ok=True)]" + END,
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, "ok": True})],
    ),
    Case("empty_args", BEGIN + "[ping()]" + END, None, [("ping", {})]),
    Case(
        "malformed_positional_is_content",
        "Hi " + BEGIN + "[f(1)]" + END + " after",
        "Hi " + BEGIN + "[f(1)]" + END + " after",
    ),
    Case(
        "malformed_not_a_list_is_content",
        BEGIN + 'f(a="x")' + END,
        BEGIN + 'f(a="x")' + END,
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure " + BEGIN + '[f(a="x',
        "Sure " + BEGIN + '[f(a="x',
    ),
    Case(
        "cut_off_complete_body_recovered",
        BEGIN + '[f(a="b")]' + "<|tool_call_e",
        None,
        [("f", {"a": "b"})],
    ),
    # LFM2 also writes JSON calls between the same markers (SGLang's
    # lfm2_detector.py reads both forms): a list of objects, or one object.
    Case(
        "json_list",
        "Checking. " + BEGIN + '[{"name": "get_weather", "arguments": {"city": "Berlin"}}]' + END,
        "Checking. ",
        [("get_weather", {"city": "Berlin"})],
    ),
    Case(
        "json_parallel_with_json_literals",
        BEGIN
        + '[{"name": "a", "arguments": {"ok": true, "none": null}}, '
        + '{"name": "b", "arguments": {"q": "東京 🙂"}}]'
        + END
        + "Done.",
        "Done.",
        [("a", {"ok": True, "none": None}), ("b", {"q": "東京 🙂"})],
    ),
    Case(
        "json_parameters_key",
        BEGIN + '[{"name": "get_weather", "parameters": {"city": "Madrid"}}]' + END,
        None,
        [("get_weather", {"city": "Madrid"})],
    ),
    Case(
        "json_single_object",
        BEGIN + ' {"name": "get_weather", "arguments": {"city": "Vienna"}} ' + END,
        None,
        [("get_weather", {"city": "Vienna"})],
    ),
    Case(
        "json_cut_off_complete_body_recovered",
        BEGIN + '[{"name": "f", "arguments": {}}]' + "<|tool_call_e",
        None,
        [("f", {})],
    ),
    Case(
        "malformed_json_is_content",
        "Hi " + BEGIN + '[{"name": "f", "arguments": {oops}}]' + END,
        "Hi " + BEGIN + '[{"name": "f", "arguments": {oops}}]' + END,
    ),
    Case(
        "json_without_a_name_is_content",
        BEGIN + '[{"arguments": {"a": 1}}]' + END,
        BEGIN + '[{"arguments": {"a": 1}}]' + END,
    ),
    Case("plain_text", "a [list] and f(x) and <|tool", "a [list] and f(x) and <|tool"),
    Case(
        "undeclared_name_still_returned",
        BEGIN + "[other(k=True)]" + END,
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)
