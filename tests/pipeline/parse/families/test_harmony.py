"""harmony, from gpt-oss's format: channel segments after the prompt's `<|start|>assistant`.

The EOS `<|return|>` is not retained for harmony, so a final answer simply
ends; `<|call|>` is a visible stop, so a call arrives with its terminator."""

from __future__ import annotations

from rotor.pipeline.parse.base import Content, Reasoning, ToolCall, Tools
from rotor.pipeline.parse.families.harmony import HarmonyParser

from support.parsing import Case, family_tests

FAMILY = "harmony"

ANALYSIS = "<|channel|>analysis<|message|>User asks about the weather in Tokyo.<|end|>"
WEATHER = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"location": "Tokyo"}<|call|>'
)
WEATHER_SCHEMA = {"type": "object", "properties": {"location": {"type": "string"}}}

CASES = [
    Case(
        "analysis_then_call",
        ANALYSIS + WEATHER,
        None,
        [("get_weather", {"location": "Tokyo"})],
        reasoning="User asks about the weather in Tokyo.",
        tools={"get_weather": WEATHER_SCHEMA},
    ),
    Case(
        "analysis_then_final",
        "<|channel|>analysis<|message|>Simple greeting.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?",
        "Hello! How can I help?",
        reasoning="Simple greeting.",
    ),
    Case(
        "first_segment_is_a_call",
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location": "Oslo"}<|call|>',
        None,
        [("get_weather", {"location": "Oslo"})],
    ),
    Case(
        "recipient_before_channel",
        '<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{"id": 7}<|call|>',
        None,
        [("lookup", {"id": 7})],
    ),
    Case(
        "recipient_before_channel_first_segment",
        ' to=functions.lookup<|channel|>commentary <|constrain|>json<|message|>{"id": 8}<|call|>',
        None,
        [("lookup", {"id": 8})],
    ),
    Case(
        "parallel",
        '<|channel|>commentary to=functions.a <|constrain|>json<|message|>{"x": 1}<|call|>'
        '<|start|>assistant<|channel|>commentary to=functions.b <|constrain|>json<|message|>{"y": [1, 2]}<|call|>',
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "preamble_is_content",
        "<|channel|>analysis<|message|>Need a tool.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Let me check that for you.<|end|>"
        + WEATHER,
        "Let me check that for you.",
        [("get_weather", {"location": "Tokyo"})],
        reasoning="Need a tool.",
    ),
    Case(
        "text_before_and_after",
        "<|channel|>commentary<|message|>Checking.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done.",
        "Checking.Done.",
        [("f", {})],
    ),
    Case(
        "nested_unicode",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>"
        '{"q": {"city": "Montréal", "tags": ["東京", "🙂"]}}<|call|>',
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}})],
    ),
    Case(
        "empty_body_is_empty_arguments",
        "<|channel|>commentary to=functions.ping <|constrain|>json<|message|><|call|>",
        None,
        [("ping", {})],
    ),
    Case(
        "malformed_call_is_content",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{not json}<|call|>",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{not json}<|call|>",
    ),
    Case(
        "non_object_arguments_are_content",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>[1, 2]<|call|>",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>[1, 2]<|call|>",
    ),
    Case(
        "cut_off_incomplete_is_content",
        'Sure<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": ',
        'Sure<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": ',
    ),
    Case(
        "cut_off_complete_body_recovered",
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": "b"}',
        None,
        [("f", {"a": "b"})],
    ),
    Case(
        "cut_off_after_header_is_content",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
    ),
    Case(
        "cut_off_in_header_is_content",
        "<|channel|>analysis<|message|>ok<|end|><|start|>assistant<|channel|>fin",
        "<|start|>assistant<|channel|>fin",
        reasoning="ok",
    ),
    Case(
        "reasoning_cut_off_keeps_marker_like_tail",
        "<|channel|>analysis<|message|>thinking about <|",
        None,
        reasoning="thinking about <|",
    ),
    Case(
        "plain_text_without_framing",
        "Just text, a < sign and to= here",
        "Just text, a < sign and to= here",
    ),
    Case(
        "return_mid_stream_is_framing",
        "<|channel|>final<|message|>A<|return|><|start|>assistant<|channel|>final<|message|>B",
        "AB",
    ),
    Case(
        "undeclared_name_still_returned",
        '<|channel|>commentary to=functions.other <|constrain|>json<|message|>{"k": true}<|call|>',
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
    Case(
        "json_with_marker_like_text",
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"s": "a <|end b"}<|call|>',
        None,
        [("f", {"s": "a <|end b"})],
    ),
]

# `tool_choice: "none"`: a recipient makes no call; the segment is text of its
# channel (docs/tool-calling.md, tool_choice).
NONE = Tools.forbidden()
UNCALLED = [
    Case(
        "none_analysis_then_call_body_is_content",
        ANALYSIS + WEATHER,
        '{"location": "Tokyo"}',
        reasoning="User asks about the weather in Tokyo.",
        tools=NONE,
    ),
    Case(
        "none_preamble_call_and_final_are_content_in_order",
        "<|channel|>commentary<|message|>Let me check.<|end|>"
        + WEATHER
        + "<|start|>assistant<|channel|>final<|message|>Done.",
        'Let me check.{"location": "Tokyo"}Done.',
        tools=NONE,
    ),
    Case(
        "none_recipient_before_channel",
        '<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{"id": 7}<|call|>',
        '{"id": 7}',
        tools=NONE,
    ),
    Case(
        "none_first_segment_recipient_only",
        ' to=functions.lookup<|channel|>commentary <|constrain|>json<|message|>{"id": 8}<|call|>',
        '{"id": 8}',
        tools=NONE,
    ),
    Case(
        "none_analysis_addressed_to_a_tool_is_reasoning",
        '<|channel|>analysis to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>',
        None,
        reasoning='{"a": 1}',
        tools=NONE,
    ),
    Case(
        "none_body_that_is_no_json_is_content_as_written",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{not json}<|call|>",
        "{not json}",
        tools=NONE,
    ),
    Case(
        "none_body_cut_off_is_content",
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": ',
        '{"a": ',
        tools=NONE,
    ),
    Case(
        "none_two_calls_are_content",
        '<|channel|>commentary to=functions.a <|constrain|>json<|message|>{"x": 1}<|call|>'
        '<|start|>assistant<|channel|>commentary to=functions.b <|constrain|>json<|message|>{"y": 2}<|end|>',
        '{"x": 1}{"y": 2}',
        tools=NONE,
    ),
]


globals().update(family_tests(FAMILY, CASES + UNCALLED, examples=80))


def test_declares_what_the_decoder_must_do() -> None:
    assert HarmonyParser.needs_special_tokens
    assert HarmonyParser.visible_stop_markers == ("<|call|>",)
    assert HarmonyParser.handles_reasoning
    assert not HarmonyParser.wants_eos_text


def test_reasoning_and_content_stream_before_the_segment_ends() -> None:
    parser = HarmonyParser(Tools())
    assert parser.feed("<|channel|>analysis<|message|>Thin") == [Reasoning("Thin")]
    assert parser.feed("king<|e") == [Reasoning("king")]  # `<|e` may still be `<|end|>`
    assert parser.feed("nd|><|start|>assistant<|channel|>final<|message|>Hi") == [Content("Hi")]
    assert parser.feed(" there") == [Content(" there")]  # fast path: one piece, no buffering
    assert parser.finish() == []


def test_call_is_emitted_when_closed() -> None:
    parser = HarmonyParser(Tools({"f": {}}))
    assert (
        parser.feed('<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}')
        == []
    )
    pieces = parser.feed("<|call|>")
    assert [type(p) for p in pieces] == [ToolCall]
    assert pieces[0].name == "f" and pieces[0].arguments == '{"a": 1}'


def test_under_none_a_call_body_streams_as_content() -> None:
    """`tool_choice: "none"`: the body goes out as it arrives, no call at the end."""
    parser = HarmonyParser(Tools.forbidden())
    assert parser.feed("<|channel|>commentary to=functions.f <|constrain|>json<|message|>") == []
    assert parser.feed('{"a": ') == [Content('{"a": ')]
    assert parser.feed("1}") == [Content("1}")]
    assert parser.feed("<|call|>") == []
    assert parser.finish() == []


def test_without_tools_a_call_is_one_to_an_undeclared_tool() -> None:
    """No tools and no `none`: the call the model wrote is returned, as before."""
    parser = HarmonyParser(Tools())
    pieces = parser.feed(
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}'
    )
    pieces += parser.feed("<|call|>") + parser.finish()
    assert pieces == [ToolCall("f", '{"a": 1}')]
