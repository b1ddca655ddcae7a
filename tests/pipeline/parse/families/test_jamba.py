"""jamba, from its format: `<tool_calls>`, a JSON list of `{"name", "arguments"}`
objects (the parallel calls), then `</tool_calls>`; the cases are nemotron_deci's
too (support/parsing.py `json_list_cases`)."""

from __future__ import annotations

from support.parsing import Case, check_case, family_tests, json_list_cases

FAMILY = "jamba"

START = "<tool_calls>"
END = "</tool_calls>"

CASES = json_list_cases(START, END, partial_start="<tool_c")


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)


def test_complete_list_cut_off_inside_its_end_marker_is_recovered() -> None:
    check_case(
        FAMILY,
        Case(
            "cut_off_inside_end_marker",
            START
            + '[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]</tool_ca',
            None,
            [("a", {"x": 1}), ("b", {})],
        ),
    )
