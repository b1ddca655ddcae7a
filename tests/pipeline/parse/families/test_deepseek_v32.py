"""deepseek_v32, from its format (DeepSeek V3.2's DSML, as its encoding and
vLLM's parser write it): a `<｜DSML｜function_calls>` section of invokes, each
parameter marked raw string or JSON; an invoke may hold its arguments as one
JSON object instead (SGLang's deepseekv32_detector.py reads that form)."""

from __future__ import annotations

from support.dsml import dsml_cases
from support.parsing import Case, family_tests

FAMILY = "deepseek_v32"
BEGIN, END = "<｜DSML｜function_calls>", "</｜DSML｜function_calls>"

SPOTS = {
    "get_favorite_tourist_spot": {"type": "object", "properties": {"city": {"type": "string"}}},
    "search": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "topn": {"type": "integer"}},
    },
}


def json_invoke(name: str, body: str) -> str:
    return f'<｜DSML｜invoke name="{name}">\n{body}\n</｜DSML｜invoke>\n'


CASES = [
    *dsml_cases(BEGIN, END),
    Case(
        "json_arguments",
        "I'll look it up.\n\n"
        + BEGIN
        + "\n"
        + json_invoke("get_favorite_tourist_spot", '{\n    "city": "San Francisco"\n}')
        + json_invoke("search", '{"query": "WebNav benchmark", "topn": 10, "ok": true}')
        + END,
        "I'll look it up.\n\n",
        [
            ("get_favorite_tourist_spot", {"city": "San Francisco"}),
            ("search", {"query": "WebNav benchmark", "topn": 10, "ok": True}),
        ],
        tools=SPOTS,
    ),
    Case(
        "json_and_parameter_invokes_mixed",
        BEGIN
        + json_invoke("f", '{"q": {"city": "Montréal", "tags": ["東京", "🙂"]}}')
        + '<｜DSML｜invoke name="g">\n'
        + '<｜DSML｜parameter name="n" string="false">3</｜DSML｜parameter>\n'
        + "</｜DSML｜invoke>\n"
        + END,
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}}), ("g", {"n": 3})],
    ),
    Case(
        "json_empty_object",
        BEGIN + json_invoke("ping", "{}") + END,
        None,
        [("ping", {})],
    ),
    Case(
        "malformed_json_arguments_are_content",
        "Hi " + BEGIN + json_invoke("f", '{"city": }') + END,
        "Hi " + BEGIN + json_invoke("f", '{"city": }') + END,
    ),
    Case(
        "json_that_is_not_an_object_is_content",
        BEGIN + json_invoke("f", "[1, 2]") + END,
        BEGIN + json_invoke("f", "[1, 2]") + END,
    ),
]

globals().update(
    family_tests(FAMILY, CASES, special_tokens=False, fast_path="no markup here, just words")
)
