"""minimax_m2, from its format: a `<minimax:tool_call>` section holding one
`<invoke name="f">` per call, each with `<parameter name="a">` values."""

from __future__ import annotations

from support.parsing import WEATHER, Case, family_tests

FAMILY = "minimax_m2"

SEARCH = {
    "search_web": {
        "type": "object",
        "properties": {"query_list": {"type": "array"}, "query_tag": {"type": "array"}},
    }
}


def invoke(name: str, *params: tuple[str, str]) -> str:
    """One invoke the way MiniMax M2's template writes it."""
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params)
    return f'<invoke name="{name}">\n{body}</invoke>\n'


def section(*invokes: str) -> str:
    return "<minimax:tool_call>\n" + "".join(invokes) + "</minimax:tool_call>"


CASES = [
    Case(
        "one_call_typed_by_schema",
        section(invoke("get_weather", ("city", "Paris"), ("days", "3"))),
        None,
        [("get_weather", {"city": "Paris", "days": 3})],
        tools=WEATHER,
    ),
    Case(
        "parallel_invokes_in_one_section",
        section(
            invoke(
                "search_web",
                ("query_tag", '["technology", "events"]'),
                ("query_list", '["\\"OpenAI\\" \\"latest\\" \\"release\\""]'),
            ),
            invoke(
                "search_web",
                ("query_tag", '["technology", "events"]'),
                ("query_list", '["\\"Gemini\\" \\"latest\\" \\"release\\""]'),
            ),
        ),
        None,
        [
            (
                "search_web",
                {
                    "query_tag": ["technology", "events"],
                    "query_list": ['"OpenAI" "latest" "release"'],
                },
            ),
            (
                "search_web",
                {
                    "query_tag": ["technology", "events"],
                    "query_list": ['"Gemini" "latest" "release"'],
                },
            ),
        ],
        tools=SEARCH,
    ),
    Case(
        "two_sections",
        section(invoke("a", ("x", "1"))) + "\n" + section(invoke("b", ("y", "2"))),
        None,
        [("a", {"x": "1"}), ("b", {"y": "2"})],
    ),
    Case(
        "text_around",
        "Let me help you query the weather.\n"
        + section(invoke("get_weather", ("city", "San Francisco")))
        + "\nOne moment.",
        "Let me help you query the weather.\n\nOne moment.",
        [("get_weather", {"city": "San Francisco"})],
        tools=WEATHER,
    ),
    Case(
        "nested_unicode",
        section(
            invoke("f", ("q", '{"city": "Montréal", "tags": ["東京", "🙂"]}'), ("s", "naïve ☕"))
        ),
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, "s": "naïve ☕"})],
        tools={"f": {"properties": {"q": {"type": "object"}, "s": {"type": "string"}}}},
    ),
    Case(
        "empty_args",
        '<minimax:tool_call><invoke name="ping"></invoke></minimax:tool_call>',
        None,
        [("ping", {})],
    ),
    Case(
        "compact_single_quoted_names",
        "<minimax:tool_call><invoke name='f'><parameter name='a'>1</parameter></invoke>"
        "</minimax:tool_call>",
        None,
        [("f", {"a": "1"})],
    ),
    Case(
        "values_trimmed_and_strings_without_schema",
        section(invoke("f", ("text", "\n  two lines\nhere  \n"), ("n", "5"))),
        None,
        [("f", {"text": "two lines\nhere", "n": "5"})],
    ),
    Case(
        "typed_values",
        section(invoke("set", ("r", "0.5"), ("on", "true"), ("none", "null"), ("n", "x"))),
        None,
        [("set", {"r": 0.5, "on": True, "none": None, "n": "x"})],
        tools={
            "set": {
                "properties": {
                    "r": {"type": "number"},
                    "on": {"type": "boolean"},
                    "none": {"type": "null"},
                    "n": {"type": "integer"},
                }
            }
        },
    ),
    Case(
        "malformed_unclosed_invoke_is_content",
        'Hi <minimax:tool_call><invoke name="f"><parameter name="a">1</parameter>'
        "</minimax:tool_call>",
        'Hi <minimax:tool_call><invoke name="f"><parameter name="a">1</parameter>'
        "</minimax:tool_call>",
    ),
    Case(
        "malformed_invoke_without_name_is_content",
        "<minimax:tool_call><invoke>x</invoke></minimax:tool_call>",
        "<minimax:tool_call><invoke>x</invoke></minimax:tool_call>",
    ),
    Case(
        "cut_off_incomplete_is_content",
        'Sure <minimax:tool_call>\n<invoke name="f">\n<parameter name="a">1',
        'Sure <minimax:tool_call>\n<invoke name="f">\n<parameter name="a">1',
    ),
    Case(
        "cut_off_complete_body_recovered",
        '<minimax:tool_call>\n<invoke name="f">\n<parameter name="a">b</parameter>\n</invoke>\n'
        "</minimax:tool",
        None,
        [("f", {"a": "b"})],
    ),
    Case("plain_text", 'x <invoke name="f"> y <minimax:', 'x <invoke name="f"> y <minimax:'),
    Case(
        "undeclared_name_still_returned",
        section(invoke("other", ("k", "v"))),
        None,
        [("other", {"k": "v"})],
        tools={"declared": {}},
    ),
]


globals().update(
    family_tests(
        FAMILY,
        CASES,
        fast_path="no markup here",
        fast_path_tools={"f": {}},
        released=("<minimax", "!", '<minimax:tool_call><invoke name="f">'),
    )
)
