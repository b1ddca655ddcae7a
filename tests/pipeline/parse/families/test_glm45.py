"""glm45, from its format: `<tool_call>` with the name first, then
`<arg_key>`/`<arg_value>` pairs (one per line in 4.5/4.6, run together in 4.7)."""

from __future__ import annotations

from support.parsing import WEATHER, Case, call_cases, family_tests

FAMILY = "glm45"

TYPED = {
    "set": {
        "type": "object",
        "properties": {
            "ratio": {"type": "number"},
            "on": {"type": "boolean"},
            "ids": {"type": "array"},
            "note": {"type": ["string", "null"]},
            "text": {"type": "string"},
        },
    }
}


def call(name: str, *pairs: tuple[str, str]) -> str:
    """One call the way GLM 4.5's template writes it."""
    args = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in pairs)
    return f"<tool_call>{name}\n{args}</tool_call>"


CASES = call_cases(call) + [
    Case(
        "glm47_compact",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
        None,
        [("get_weather", {"city": "Paris", "days": 3})],
        tools=WEATHER,
    ),
    Case("no_args", "<tool_call>ping\n</tool_call>", None, [("ping", {})]),
    Case("no_args_glm47", "<tool_call>ping</tool_call>", None, [("ping", {})]),
    Case(
        "without_schema_values_stay_strings",
        call("f", ("n", "5"), ("obj", '{"a": 1}')),
        None,
        [("f", {"n": "5", "obj": '{"a": 1}'})],
    ),
    Case(
        "typed_values_and_verbatim_strings",
        call(
            "set",
            ("ratio", "2.5"),
            ("on", "false"),
            ("ids", "[1, 2]"),
            ("note", "null"),
            ("text", "line one\n  line two\n"),
        ),
        None,
        [
            (
                "set",
                {
                    "ratio": 2.5,
                    "on": False,
                    "ids": [1, 2],
                    "note": None,
                    "text": "line one\n  line two\n",
                },
            )
        ],
        tools=TYPED,
    ),
    Case(
        "malformed_key_without_value_is_content",
        "<tool_call>f\n<arg_key>a</arg_key>\n</tool_call> after",
        "<tool_call>f\n<arg_key>a</arg_key>\n</tool_call> after",
    ),
    Case(
        "malformed_json_body_is_content",
        '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
    ),
    Case(
        "cut_off_in_the_name_is_content",
        "Sure <tool_call>get_wea",
        "Sure <tool_call>get_wea",
    ),
    Case(
        "cut_off_in_a_value_is_content",
        "Sure <tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1",
        "Sure <tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1",
    ),
    Case(
        "cut_off_complete_body_recovered",
        "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>b</arg_value>\n</tool",
        None,
        [("f", {"a": "b"})],
    ),
    Case("plain_text", "x <arg_key> y <tool", "x <arg_key> y <tool"),
]


globals().update(
    family_tests(
        FAMILY,
        CASES,
        fast_path="no markup here",
        fast_path_tools={"f": {}},
        released=("<tool", "box", "<tool_call>f"),
    )
)
