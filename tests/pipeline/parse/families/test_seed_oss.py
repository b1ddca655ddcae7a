"""seed_oss, from its format (Seed-OSS's chat template and vLLM's reference
parser): Qwen3-Coder's `<function=f><parameter=a>` inside `<seed:tool_call>`."""

from __future__ import annotations

from support.parsing import Case, family_tests

FAMILY = "seed_oss"

WEATHER = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "int"}},
    }
}


def call(name: str, *params: tuple[str, str]) -> str:
    """One call the way Seed-OSS writes it."""
    body = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params)
    return f"<seed:tool_call>\n<function={name}>\n{body}</function>\n</seed:tool_call>"


CASES = [
    Case(
        "one_call_typed_by_schema",
        call("get_weather", ("city", "Paris"), ("days", "3")),
        None,
        [("get_weather", {"city": "Paris", "days": 3})],
        tools=WEATHER,
    ),
    Case(
        "parallel",
        call("get_weather", ("city", "Paris")) + "\n" + call("get_weather", ("city", "Oslo")),
        None,
        [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})],
        tools=WEATHER,
    ),
    Case(
        "text_around",
        "Let me check.\n" + call("f", ("q", "x")) + "\nDone.",
        "Let me check.\n\nDone.",
        [("f", {"q": "x"})],
    ),
    Case(
        "nested_unicode",
        call("f", ("q", '{"city": "Montréal", "tags": ["東京", "🙂"]}'), ("label", "naïve ☕")),
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, "label": "naïve ☕"})],
        tools={"f": {"properties": {"q": {"type": "object"}, "label": {"type": "string"}}}},
    ),
    Case(
        "empty_args",
        "<seed:tool_call>\n<function=ping>\n</function>\n</seed:tool_call>",
        None,
        [("ping", {})],
    ),
    Case(
        "value_newlines_belong_to_the_markup",
        "<seed:tool_call>\n<function=w>\n<parameter=code>\nx = 1\n</parameter>\n</function>\n"
        "</seed:tool_call>",
        None,
        [("w", {"code": "x = 1"})],
    ),
    Case(
        "malformed_missing_function_end_is_content",
        "<seed:tool_call>\n<function=f>\n<parameter=a>1</parameter>\n</seed:tool_call> after",
        "<seed:tool_call>\n<function=f>\n<parameter=a>1</parameter>\n</seed:tool_call> after",
    ),
    Case(
        "qwen_markers_are_plain_text_here",
        "<tool_call>\n<function=f>\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n</function>\n</tool_call>",
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure <seed:tool_call>\n<function=f>\n<parameter=a>1",
        "Sure <seed:tool_call>\n<function=f>\n<parameter=a>1",
    ),
    Case(
        "cut_off_complete_body_recovered",
        "<seed:tool_call>\n<function=f>\n<parameter=a>b</parameter>\n</function>\n</seed:to",
        None,
        [("f", {"a": "b"})],
    ),
    Case("plain_text", "a < b and <seed: and <function=x>", "a < b and <seed: and <function=x>"),
    Case(
        "undeclared_name_still_returned",
        call("other", ("k", "v")),
        None,
        [("other", {"k": "v"})],
        tools={"declared": {}},
    ),
]


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)
