"""mistral, from its formats: before tokenizer v11 one JSON list after
`[TOOL_CALLS]`; from v11 `[TOOL_CALLS]f[ARGS]{...}` per call, optionally with
`[CALL_ID]id` between the name and the arguments. No end marker."""

from __future__ import annotations

import pytest

from rotor.pipeline.parse.base import Content, ToolCall, Tools
from rotor.pipeline.parse.families import mistral
from rotor.pipeline.parse.message import MessageParser
from rotor.pipeline.parse.tools import tool_parser

from support.parsing import Case, family_tests, parse_chunks

FAMILY = "mistral"
TC = "[TOOL_CALLS]"

CASES = [
    Case(
        "v3_list_one_call",
        TC + ' [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "v3_list_parallel",
        TC + '[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": [1, 2]}}]',
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "v3_list_parameters_key_and_ids",
        TC + '[{"name": "f", "parameters": {"q": "x"}, "id": "a1b2c3d4e"}]',
        None,
        [("f", {"q": "x"})],
    ),
    Case(
        "v11_one_call",
        TC + 'get_weather[ARGS]{"city": "Paris"}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "v11_parallel",
        TC + 'a[ARGS]{"x": 1}' + TC + 'b[ARGS]{"y": [1, 2]}',
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "v11_call_id",
        TC
        + 'get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}'
        + TC
        + "ping[CALL_ID]Z9y8X7w6V[ARGS]{}",
        None,
        [("get_weather", {"city": "Paris"}), ("ping", {})],
    ),
    Case(
        "v11_args_token_dropped_by_decode",
        TC + 'get_weather{"city": "Paris"}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "text_before_and_after",
        "Let me check.\n" + TC + "f[ARGS]{}\nDone.",
        "Let me check.\n\nDone.",
        [("f", {})],
    ),
    Case(
        "nested_unicode",
        TC + 'f[ARGS]{"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, "s": "a } [ARGS] b"}',
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, "s": "a } [ARGS] b"})],
    ),
    Case("empty_args", TC + "ping[ARGS]{}", None, [("ping", {})]),
    Case(
        "dashed_and_dotted_names",
        TC + "get-weather[ARGS]{}" + TC + "mcp.search[ARGS]{}",
        None,
        [("get-weather", {}), ("mcp.search", {})],
    ),
    Case(
        "malformed_list_is_content",
        TC + '[{"name": "f", "arguments": {oops}}] after',
        TC + '[{"name": "f", "arguments": {oops}}] after',
    ),
    Case(
        "list_item_without_name_is_content",
        TC + '[{"arguments": {}}]',
        TC + '[{"arguments": {}}]',
    ),
    Case(
        "v11_args_not_json_is_content",
        TC + "f[ARGS]not json at all",
        TC + "f[ARGS]not json at all",
    ),
    Case(
        "v11_args_array_is_content",
        TC + "f[ARGS][1, 2] then",
        TC + "f[ARGS][1, 2] then",
    ),
    Case(
        "marker_then_prose_is_content",
        TC + "Sure, here you go.",
        TC + "Sure, here you go.",
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure " + TC + 'f[ARGS]{"a": "b',
        "Sure " + TC + 'f[ARGS]{"a": "b',
    ),
    Case("cut_off_in_name_is_content", TC + "get_wea", TC + "get_wea"),
    Case(
        "cut_off_in_args_marker_is_content",
        TC + "get_weather[AR",
        TC + "get_weather[AR",
    ),
    Case(
        "cut_off_second_call_keeps_first",
        TC + "a[ARGS]{}" + TC + 'b[ARGS]{"x',
        TC + 'b[ARGS]{"x',
        [("a", {})],
    ),
    Case("plain_text", "See [1] and [2], then [TOOL", "See [1] and [2], then [TOOL"),
    Case(
        "undeclared_name_still_returned",
        TC + 'other[ARGS]{"k": true}',
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)


def test_call_ids_written_by_the_model_are_kept() -> None:
    tools = Tools({"f": {}, "g": {}})
    v11 = TC + "f[CALL_ID]a1b2c3d4e[ARGS]{}" + TC + "g[ARGS]{}"
    msg = parse_chunks(FAMILY, list(v11), tools)
    assert msg.raw_calls[0].id == "a1b2c3d4e"
    assert msg.raw_calls[1].id is not None and msg.raw_calls[1].id.startswith("call_")
    listed = (
        TC + '[{"name": "f", "arguments": {}, "id": "Z9y8X7w6V"}, {"name": "g", "arguments": {}}]'
    )
    msg = parse_chunks(FAMILY, [listed], tools)
    assert msg.raw_calls[0].id == "Z9y8X7w6V"
    assert msg.raw_calls[1].id is not None and msg.raw_calls[1].id.startswith("call_")


def test_parallel_tool_calls_false_keeps_the_first() -> None:
    parser = MessageParser(
        tools=tool_parser(FAMILY)(Tools({"a": {}, "b": {}})), parallel_tool_calls=False
    )
    pieces = parser.feed(TC + "a[ARGS]{}" + TC + "b[ARGS]{}") + parser.finish()
    assert [p.name for p in pieces if not isinstance(p, Content)] == ["a"]


def test_call_is_sent_when_its_arguments_close() -> None:
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    assert parser.feed(TC + 'f[ARGS]{"a": {"b": 1}') == []
    pieces = parser.feed("}")
    assert [(p.name, p.arguments) for p in pieces] == [("f", '{"a": {"b": 1}}')]


@pytest.mark.parametrize(
    "head", ["get_weather[ARGS]", "get_weather[CALL_ID]a1b2c3d4e[ARGS] ", "get_weather", ""]
)
def test_a_long_call_reads_its_head_once(head: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the head (name, id, `[ARGS]`) is known, later tokens only extend
    the value scan: the head is not parsed again per token."""
    reads = 0
    real_head = mistral._head

    def counted(body: str) -> object:
        nonlocal reads
        reads += 1
        return real_head(body)

    monkeypatch.setattr(mistral, "_head", counted)
    args = '{"city": "' + "x" * 4000 + '"}'
    value = ('[{"name": "get_weather", "arguments": ' + args + "}]") if not head else args
    output = TC + head + value + " then"
    parser = tool_parser(FAMILY)(Tools({"get_weather": {}}))
    pieces = []
    for i in range(0, len(output), 4):
        pieces += parser.feed(output[i : i + 4])
    pieces += parser.finish()
    calls = [p for p in pieces if isinstance(p, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", args)]
    assert "".join(p.text for p in pieces if isinstance(p, Content)) == " then"
    # While the head arrives (a feed of 4 characters each), then once to parse it.
    assert reads <= len(head) // 4 + 4
