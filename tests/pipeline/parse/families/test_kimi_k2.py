"""kimi_k2, from its format: one section of call blocks, each `functions.f:i`,
the argument marker and the JSON arguments; the `functions.f:i` id is kept."""

from __future__ import annotations

from rotor.pipeline.parse.base import Tools
from rotor.pipeline.parse.message import MessageParser
from rotor.pipeline.parse.tools import tool_parser

from support.parsing import Case, family_tests, parse_chunks

FAMILY = "kimi_k2"

BEGIN = "<|tool_calls_section_begin|>"
END = "<|tool_calls_section_end|>"


def block(call_id: str, args: str) -> str:
    """One call block exactly as Kimi K2's template writes it."""
    return f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{args}<|tool_call_end|>"


# Tools as a Kimi-K2.5 agent declares them: the schemas tell unnamed blocks apart.
K25_TOOLS = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
    "exec": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}

CASES = [
    Case(
        "one_call",
        BEGIN + block("functions.get_weather:0", '{"city": "Paris"}') + END,
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "parallel_in_one_section",
        BEGIN + block("functions.a:0", '{"x": 1}') + block("functions.b:1", '{"y": [1, 2]}') + END,
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "text_around",
        "Let me check.\n" + BEGIN + block("functions.f:0", "{}") + END + "\nDone.",
        "Let me check.\n\nDone.",
        [("f", {})],
    ),
    Case(
        "nested_unicode",
        BEGIN + block("functions.f:3", '{"q": {"city": "Montréal", "tags": ["東京", "🙂"]}}') + END,
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}})],
    ),
    Case("empty_args", BEGIN + block("functions.ping:0", "{}") + END, None, [("ping", {})]),
    Case(
        "whitespace_around_id_and_between_blocks",
        BEGIN
        + "\n"
        + block(" functions.a:0 ", ' {"x": 1} ')
        + "\n"
        + block("functions.b:1", "{}")
        + END,
        None,
        [("a", {"x": 1}), ("b", {})],
    ),
    Case(
        "dotted_name_and_no_prefix",
        BEGIN + block("functions.mcp.search:0", '{"q": "x"}') + block("lookup:1", "{}") + END,
        None,
        [("mcp.search", {"q": "x"}), ("lookup", {})],
    ),
    Case(
        "singular_section_markers",
        "<|tool_call_section_begin|>"
        + block("functions.f:0", '{"a": 1}')
        + "<|tool_call_section_end|> ok",
        " ok",
        [("f", {"a": 1})],
    ),
    Case(
        "malformed_json_is_content",
        "Hi " + BEGIN + block("functions.f:0", "{not json}") + END + " after",
        "Hi " + BEGIN + block("functions.f:0", "{not json}") + END + " after",
    ),
    Case(
        "id_without_index_keeps_its_name",
        BEGIN + block("functions.f", "{}") + END,
        None,
        [("f", {})],
    ),
    # vLLM skips a block whose id has no `:N` (test_invalid_funcall_id_skipped
    # in tests/tool_parsers/test_kimi_k2_tool_parser.py); SGLang's id pattern
    # turns it down too: `functions.invalid.0` does not name `invalid.0`.
    Case(
        "invalid_id_is_content_the_rest_kept",
        "Help. "
        + BEGIN
        + block("functions.invalid.0", '{"city": "Beijing"}')
        + block("functions.valid:1", '{"city": "Shanghai"}')
        + END,
        "Help. " + block("functions.invalid.0", '{"city": "Beijing"}'),
        [("valid", {"city": "Shanghai"})],
    ),
    Case(
        "invalid_id_alone_is_content",
        BEGIN + block("functions.get_weather.0", '{"city": "Oslo"}') + END,
        BEGIN + block("functions.get_weather.0", '{"city": "Oslo"}') + END,
        tools={"get_weather": {}, "exec": {}},
    ),
    Case(
        "invalid_id_name_inferred_from_the_schema",
        BEGIN + block("functions.weather.0", '{"city": "Oslo", "days": 2}') + END,
        None,
        [("get_weather", {"city": "Oslo", "days": 2})],
        tools=K25_TOOLS,
    ),
    # Kimi-K2.5 ids that are not `functions.NAME:N` (defect 1 of issue 13).
    Case(
        "bare_counter_id_name_inferred_from_the_schema",
        BEGIN
        + "<|tool_call_begin|>0 <|tool_call_argument_begin|>"
        + '{"cmd": "ls -la"}<|tool_call_end|>'
        + END,
        None,
        [("exec", {"cmd": "ls -la"})],
        tools=K25_TOOLS,
    ),
    Case(
        "call_counter_and_squashed_ids",
        BEGIN
        + block("call00003", '{"city": "Oslo", "days": 2}')
        + block("functionsexec5", '{"cmd": "pwd"}')
        + END,
        None,
        [("get_weather", {"city": "Oslo", "days": 2}), ("exec", {"cmd": "pwd"})],
        tools=K25_TOOLS,
    ),
    Case(
        "unnamed_block_that_fits_no_tool_is_content_the_rest_kept",
        BEGIN
        + block("functions.get_weather:0", '{"city": "Paris"}')
        + block("7", '{"nothing": "fits"}')
        + block("functions.exec:2", '{"cmd": "date"}')
        + END,
        block("7", '{"nothing": "fits"}'),
        [("get_weather", {"city": "Paris"}), ("exec", {"cmd": "date"})],
        tools=K25_TOOLS,
    ),
    Case(
        "unnamed_block_that_fits_two_tools_is_content",
        BEGIN + block("1", "{}") + block("functions.exec:2", '{"cmd": "date"}') + END,
        block("1", "{}"),
        [("exec", {"cmd": "date"})],
        tools={"a": {}, "b": {}, "exec": {"properties": {"cmd": {}}, "required": ["cmd"]}},
    ),
    Case(
        "bad_json_in_one_block_keeps_the_others",
        BEGIN + block("functions.a:0", "{oops") + block("functions.b:1", '{"y": 1}') + END,
        block("functions.a:0", "{oops"),
        [("b", {"y": 1})],
    ),
    # A section cut off mid-way through parallel calls (defect 2).
    Case(
        "cut_off_in_the_last_block_keeps_the_complete_calls",
        "Checking. "
        + BEGIN
        + block("functions.a:0", '{"x": 1}')
        + block("functions.b:1", '{"y": 2}')
        + '<|tool_call_begin|>functions.c:2<|tool_call_argument_begin|>{"z": ',
        'Checking. <|tool_call_begin|>functions.c:2<|tool_call_argument_begin|>{"z": ',
        [("a", {"x": 1}), ("b", {"y": 2})],
    ),
    Case(
        "cut_off_between_blocks_keeps_the_complete_calls",
        BEGIN + block("functions.a:0", '{"x": 1}') + "\n<|tool_call_beg",
        None,
        [("a", {"x": 1})],
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure " + BEGIN + '<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"a',
        "Sure " + BEGIN + '<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"a',
    ),
    Case(
        "cut_off_complete_body_recovered",
        BEGIN + block("functions.f:0", '{"a": "b"}') + "<|tool_call_sec",
        None,
        [("f", {"a": "b"})],
    ),
    Case("plain_text", "Just text with a < sign and <|tool", "Just text with a < sign and <|tool"),
    Case(
        "undeclared_name_still_returned",
        BEGIN + block("functions.other:0", '{"k": true}') + END,
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)


def test_call_keeps_kimis_own_id() -> None:
    output = BEGIN + block("functions.get_weather:0", "{}") + block("lookup:1", "{}") + END
    msg = parse_chunks(FAMILY, list(output), Tools({"get_weather": {}, "lookup": {}}))
    assert [c.id for c in msg.raw_calls] == ["functions.get_weather:0", "lookup:1"]


def test_ids_the_model_wrote_are_kept_even_when_the_name_is_inferred() -> None:
    output = BEGIN + block("call00003", '{"cmd": "ls"}') + block("0", '{"city": "Rome"}') + END
    msg = parse_chunks(FAMILY, list(output), Tools(K25_TOOLS))
    assert [(c.name, c.id) for c in msg.raw_calls] == [("exec", "call00003"), ("get_weather", "0")]


def test_own_id_survives_parallel_tool_calls_false() -> None:
    output = BEGIN + block("functions.a:4", "{}") + block("functions.b:5", "{}") + END
    parser = MessageParser(
        tools=tool_parser(FAMILY)(Tools({"a": {}, "b": {}})), parallel_tool_calls=False
    )
    pieces = parser.feed(output) + parser.finish()
    assert [(p.name, p.id) for p in pieces] == [("a", "functions.a:4")]
