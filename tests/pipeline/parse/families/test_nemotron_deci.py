"""nemotron_deci, from its format: `<TOOLCALL>`, a JSON list of `{"name", "arguments"}`
objects (the parallel calls), then `</TOOLCALL>`; the cases are jamba's too
(support/parsing.py `json_list_cases`)."""

from __future__ import annotations

from support.parsing import family_tests, json_list_cases

FAMILY = "nemotron_deci"

START = "<TOOLCALL>"
END = "</TOOLCALL>"

CASES = json_list_cases(START, END, partial_start="<TOOL")


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)
