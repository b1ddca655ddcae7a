"""The cases of the DSML tool-call families (DeepSeek V3.2 and V4 write the
same invokes and parameters; only the section's markers differ)."""

from __future__ import annotations

from support.parsing import Case


def dsml_cases(BEGIN: str, END: str) -> list[Case]:  # noqa: N803 - the markers, as the cases name them
    def param(name: str, value: str, string: bool = True) -> str:
        flag = "true" if string else "false"
        return f'<｜DSML｜parameter name="{name}" string="{flag}">{value}</｜DSML｜parameter>\n'

    def invoke(name: str, *params: str) -> str:
        return f'<｜DSML｜invoke name="{name}">\n' + "".join(params) + "</｜DSML｜invoke>\n"

    def section(*invokes: str) -> str:
        return BEGIN + "\n" + "".join(invokes) + END

    WEATHER = {
        "get_weather": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
        }
    }

    CASES = [
        Case(
            "one_call",
            section(invoke("get_weather", param("location", "杭州"), param("days", "3", False))),
            None,
            [("get_weather", {"location": "杭州", "days": 3})],
            tools=WEATHER,
        ),
        Case(
            "parallel",
            section(
                invoke("get_weather", param("location", "杭州")),
                invoke("get_weather", param("location", "北京")),
            ),
            None,
            [("get_weather", {"location": "杭州"}), ("get_weather", {"location": "北京"})],
            tools=WEATHER,
        ),
        Case(
            "text_around",
            "Let me check.\n\n" + section(invoke("f", param("q", "x"))) + "\nDone.",
            "Let me check.\n\n\nDone.",
            [("f", {"q": "x"})],
        ),
        Case(
            "nested_unicode_json_values",
            section(
                invoke(
                    "f",
                    param("q", '{"city": "Montréal", "tags": ["東京", "🙂"]}', False),
                    param("label", "naïve café ☕"),
                    param("ok", "true", False),
                )
            ),
            None,
            [
                (
                    "f",
                    {
                        "q": {"city": "Montréal", "tags": ["東京", "🙂"]},
                        "label": "naïve café ☕",
                        "ok": True,
                    },
                )
            ],
        ),
        Case(
            "string_true_keeps_json_looking_text",
            section(invoke("f", param("n", "42"), param("raw", '{"a": 1}'))),
            None,
            [("f", {"n": "42", "raw": '{"a": 1}'})],
        ),
        Case(
            "string_false_that_is_not_json_is_typed_or_kept",
            section(invoke("get_weather", param("days", "many", False))),
            None,
            [("get_weather", {"days": "many"})],
            tools=WEATHER,
        ),
        Case("empty_args", section(invoke("ping")), None, [("ping", {})]),
        Case(
            "no_newlines",
            BEGIN + '<｜DSML｜invoke name="f"><｜DSML｜parameter name="a" string="true">1'
            "</｜DSML｜parameter></｜DSML｜invoke>" + END,
            None,
            [("f", {"a": "1"})],
        ),
        Case(
            "malformed_missing_invoke_end_is_content",
            "Hi " + BEGIN + '<｜DSML｜invoke name="f">' + param("a", "1") + END + " after",
            "Hi " + BEGIN + '<｜DSML｜invoke name="f">' + param("a", "1") + END + " after",
        ),
        Case(
            "malformed_bad_string_flag_is_content",
            section(
                '<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="maybe">1'
                "</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
            ),
            section(
                '<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="maybe">1'
                "</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
            ),
        ),
        Case(
            "cut_off_incomplete_is_content",
            "Sure "
            + BEGIN
            + '\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">x',
            "Sure "
            + BEGIN
            + '\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">x',
        ),
        Case(
            "cut_off_complete_body_recovered",
            BEGIN + "\n" + invoke("f", param("a", "b")) + END[: len(END) - 6],
            None,
            [("f", {"a": "b"})],
        ),
        Case("plain_text", "a ｜ b and <｜DSML and <", "a ｜ b and <｜DSML and <"),
        Case(
            "undeclared_name_still_returned",
            section(invoke("other", param("k", "v"))),
            None,
            [("other", {"k": "v"})],
            tools={"declared": {}},
        ),
    ]

    return CASES
