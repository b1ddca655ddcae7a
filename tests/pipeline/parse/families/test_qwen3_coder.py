"""qwen3_coder, from its format: `<tool_call>` around one `<function=f>` with
`<parameter=a>` values, each value wrapped in one newline on either side."""

from __future__ import annotations

from support.parsing import Case, call_cases, family_tests

FAMILY = "qwen3_coder"

TYPED = {
    "set": {
        "type": "object",
        "properties": {
            "ratio": {"type": "number"},
            "on": {"type": "boolean"},
            "ids": {"type": "array"},
            "note": {"type": ["string", "null"]},
            "count": {"type": "integer"},
        },
    }
}


LOOSE = {
    "run": {
        "type": "object",
        "properties": {
            "n": {"type": "int"},
            "big": {"type": "uint64"},
            "ratio": {"type": "double"},
            "whole": {"type": "float"},
            "flag": {"type": "bool"},
            "opts": {"type": "dict"},
            "items": {"type": "list"},
            "label": {"type": "str"},
        },
    }
}


def call(name: str, *params: tuple[str, str]) -> str:
    """One call the way Qwen3-Coder's template writes it."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


CASES = call_cases(call) + [
    Case(
        "empty_args",
        "<tool_call>\n<function=ping>\n</function>\n</tool_call>",
        None,
        [("ping", {})],
    ),
    Case(
        "without_schema_values_stay_strings",
        call("f", ("n", "5"), ("obj", '{"a": 1}'), ("flag", "true")),
        None,
        [("f", {"n": "5", "obj": '{"a": 1}', "flag": "true"})],
    ),
    Case(
        "typed_values",
        call(
            "set",
            ("ratio", "2.5"),
            ("on", "true"),
            ("ids", "[1, 2]"),
            ("note", "null"),
            ("count", "many"),
        ),
        None,
        [("set", {"ratio": 2.5, "on": True, "ids": [1, 2], "note": None, "count": "many"})],
        tools=TYPED,
    ),
    # Type names as real Qwen3-Coder tool schemas write them (issue 13, defect 3).
    Case(
        "loose_type_names_typed_by_prefix",
        call(
            "run",
            ("n", "42"),
            ("big", "7"),
            ("ratio", "0.5"),
            ("whole", "3.0"),
            ("flag", "True"),
            ("opts", '{"a": 1}'),
            ("items", "[1, 2]"),
            ("label", "42"),
        ),
        None,
        [
            (
                "run",
                {
                    "n": 42,
                    "big": 7,
                    "ratio": 0.5,
                    "whole": 3,
                    "flag": True,
                    "opts": {"a": 1},
                    "items": [1, 2],
                    "label": "42",
                },
            )
        ],
        tools=LOOSE,
    ),
    Case(
        "object_for_an_array_parameter_is_still_decoded",
        call("run", ("items", '{"k": "v"}'), ("opts", "[1]"), ("n", "forty")),
        None,
        [("run", {"items": {"k": "v"}, "opts": [1], "n": "forty"})],
        tools=LOOSE,
    ),
    Case(
        "null_is_none_whatever_the_type",
        call("run", ("n", "null"), ("label", "null")),
        None,
        [("run", {"n": None, "label": None})],
        tools=LOOSE,
    ),
    Case(
        "multiline_value_keeps_inner_newlines",
        "<tool_call>\n<function=write>\n<parameter=code>\n\ndef f():\n    return 1\n\n"
        "</parameter>\n</function>\n</tool_call>",
        None,
        [("write", {"code": "\ndef f():\n    return 1\n"})],
    ),
    Case(
        "value_on_the_tag_line",
        "<tool_call><function=f><parameter=a>1</parameter></function></tool_call>",
        None,
        [("f", {"a": "1"})],
    ),
    Case(
        "unclosed_parameter_ends_at_next_tag",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n<parameter=b>\n2\n</function>\n</tool_call>",
        None,
        [("f", {"a": "1", "b": "2"})],
    ),
    Case(
        "two_functions_in_one_section",
        "<tool_call>\n<function=a>\n</function>\n<function=b>\n<parameter=x>\ny\n</parameter>\n"
        "</function>\n</tool_call>",
        None,
        [("a", {}), ("b", {"x": "y"})],
    ),
    Case(
        "malformed_missing_function_end_is_content",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call> after",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call> after",
    ),
    Case(
        "malformed_json_body_is_content",
        'Hi <tool_call>{"name": "f", "arguments": {}}</tool_call>',
        'Hi <tool_call>{"name": "f", "arguments": {}}</tool_call>',
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure <tool_call>\n<function=f>\n<parameter=a>\n1",
        "Sure <tool_call>\n<function=f>\n<parameter=a>\n1",
    ),
    Case(
        "cut_off_complete_body_recovered",
        "<tool_call>\n<function=f>\n<parameter=a>\nb\n</parameter>\n</function>\n",
        None,
        [("f", {"a": "b"})],
    ),
    Case(
        "cut_off_inside_end_marker_recovered",
        "<tool_call>\n<function=f>\n</function>\n</tool_ca",
        None,
        [("f", {})],
    ),
    Case(
        "plain_text",
        "a < b and <function=x> and <tool",
        "a < b and <function=x> and <tool",
    ),
]


globals().update(
    family_tests(
        FAMILY,
        CASES,
        fast_path="no markup here",
        fast_path_tools={"f": {}},
        released=("<tool", "box", "<tool_call>\n<function=f>"),
    )
)
