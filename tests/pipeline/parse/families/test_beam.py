"""beam, from `docs/beam.md`: every parser-visible B-case, lenient and strict.

`CASES` are the lenient path (`finish()`): every End except model EOS under an
installed grammar, so the output is exactly the text the parser sees (a
dropped EOS is simply absent). `EOS_CASES` are confirmed model EOS with the
grammar installed: the output stops before `<|return|>`, which the decoder
retains and the parser receives last, then `finish(strict=True)`. Both lists
run whole, one character at a time and split at random.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.pipeline.parse.base import Content, ParseError, Piece, Reasoning, ToolCall, Tools
from rotor.pipeline.parse.families.beam import BeamParser

from support.parsing import (
    Case,
    Message,
    assert_message,
    declared_tools,
    family_tests,
    fold,
    make_parser,
    parse_chunks,
    splits,
)

FAMILY = "beam"
EOS = "<|return|>"

TOOLS = {
    "weather.lookup": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
    "search": {
        "type": "object",
        "properties": {
            "q": {"type": "string"},
            "k": {"type": "string"},
            "filters": {"type": "object"},
            "exact": {"type": "boolean"},
        },
    },
    "ping": {"type": "object", "properties": {}},
}


def header(name: str = "weather.lookup", later: bool = False, constrain: bool = True) -> str:
    """A call header; `later` segments repeat `<|start|>assistant`."""
    start = "<|start|>assistant" if later else ""
    xml = " <|constrain|>xml" if constrain else ""
    return f"{start} to={name}<|channel|>analysis{xml}<|message|>"


def P(key: str, value: str) -> str:
    return f'<rfl:parameter name="{key}">{value}</rfl:parameter>'


HEADER = header()
ANALYSIS = "<|channel|>analysis<|message|>Need the weather.<|end|>"
FINAL = "<|start|>assistant<|channel|>final<|message|>"
PARIS = ("weather.lookup", {"city": "Paris"})


def beam_case(id: str, output: str, content: str | None, calls=(), reasoning=None) -> Case:
    return Case(id, output, content, list(calls), reasoning, tools=TOOLS)


CASES = [
    beam_case("B2_call_then_visible_stop", HEADER + P("city", "Paris") + "<|call|>", None, [PARIS]),
    beam_case("B4_eos_without_grammar_not_retained", HEADER + P("city", "Paris"), None, [PARIS]),
    beam_case("B5_transport_eof_recovers_body", HEADER + P("city", "Paris"), None, [PARIS]),
    beam_case("B6_length_recovers_body", HEADER + P("city", "Paris") + "\n", None, [PARIS]),
    beam_case(
        "B7_length_partial_parameter_dropped",
        ANALYSIS + header(later=True) + '<rfl:parameter name="city">Par',
        None,
        reasoning="Need the weather.",
    ),
    beam_case("B14_stop_string_cut_before_value", HEADER + '<rfl:parameter name="city">', None),
    beam_case(
        "B17_return_mid_stream_is_framing",
        HEADER + P("city", "Paris") + EOS + FINAL + "Checking" + EOS + FINAL + " more",
        "Checking more",
        [PARIS],
    ),
    beam_case(
        "B19_bare_stop_is_transport_eof",
        ANALYSIS + header(later=True) + P("city", "Paris"),
        None,
        [PARIS],
        reasoning="Need the weather.",
    ),
    beam_case(
        "B21_no_constrain",
        header(constrain=False) + P("city", "Paris") + "<|call|>",
        None,
        [PARIS],
    ),
    beam_case(
        "B22_duplicate_key_last_wins",
        header("search") + P("k", "1") + P("k", "2") + "<|call|>",
        None,
        [("search", {"k": "2"})],
    ),
    beam_case(
        "B23_value_not_stripped",
        HEADER + P("city", " Montréal ") + "<|call|>",
        None,
        [("weather.lookup", {"city": " Montréal "})],
    ),
    beam_case(
        "B24_integer_typed_by_schema",
        HEADER + P("city", "Paris") + P("days", "2") + "<|call|>",
        None,
        [("weather.lookup", {"city": "Paris", "days": 2})],
    ),
    beam_case(
        "typed_value_that_does_not_parse_stays_text",
        HEADER + P("city", "Paris") + P("days", "two") + "<|call|>",
        None,
        [("weather.lookup", {"city": "Paris", "days": "two"})],
    ),
    beam_case(
        "analysis_then_final",
        "<|channel|>analysis<|message|>r<|end|><|channel|>final<|message|>Hi",
        "Hi",
        reasoning="r",
    ),
    beam_case(
        "parallel_calls_end_then_call",
        HEADER
        + P("city", "Paris")
        + "<|end|>"
        + header(later=True)
        + P("city", "Lyon")
        + "<|call|>",
        None,
        [PARIS, ("weather.lookup", {"city": "Lyon"})],
    ),
    beam_case(
        "text_before_and_after_calls",
        "<|channel|>final<|message|>Let me look.<|end|>"
        + header(later=True)
        + P("city", "Paris")
        + "<|end|>"
        + FINAL
        + "It is sunny.",
        "Let me look.It is sunny.",
        [PARIS],
    ),
    beam_case(
        "nested_and_unicode_values",
        header("search")
        + P("q", "café <b> & 東京 🙂")
        + P("filters", '{"tags": ["東京", "🙂"], "n": {"m": 1}}')
        + P("exact", "true")
        + "<|call|>",
        None,
        [
            (
                "search",
                {
                    "q": "café <b> & 東京 🙂",
                    "filters": {"tags": ["東京", "🙂"], "n": {"m": 1}},
                    "exact": True,
                },
            )
        ],
    ),
    beam_case("empty_arguments", header("ping") + "<|call|>", None, [("ping", {})]),
    beam_case(
        "multiline_value_and_whitespace_between_parameters",
        header("search") + "\n" + P("q", "line 1\nline 2\n") + "\n  " + P("k", "") + "\n<|call|>",
        None,
        [("search", {"q": "line 1\nline 2\n", "k": ""})],
    ),
    beam_case(
        "malformed_body_dropped_later_text_kept",
        HEADER + "junk" + P("city", "Paris") + "<|end|>" + FINAL + "Sorry.",
        "Sorry.",
    ),
    beam_case("cut_off_after_header_is_nothing", HEADER, None),
    beam_case(
        "cut_off_in_header_is_nothing",
        "<|channel|>analysis<|message|>ok<|end|><|start|>assistant to=weather.lo",
        None,
        reasoning="ok",
    ),
    beam_case(
        "functions_prefix_stripped_when_declared",
        header("functions.weather.lookup") + P("city", "Paris") + "<|call|>",
        None,
        [PARIS],
    ),
    beam_case(
        "functions_prefix_kept_when_undeclared",
        header("functions.other") + P("a", "1") + "<|call|>",
        None,
        [("functions.other", {"a": "1"})],
    ),
    beam_case(
        "undeclared_name_still_returned_when_lenient",
        header("other.tool") + P("a", "1") + "<|call|>",
        None,
        [("other.tool", {"a": "1"})],
    ),
    beam_case(
        "reasoning_keeps_marker_like_text",
        "<|channel|>analysis<|message|>a <rfl:parameter> and <|x|><|end|>",
        None,
        reasoning="a <rfl:parameter> and <|x|>",
    ),
    beam_case("plain_text_without_framing", "Hello there", "Hello there"),
]

# `tool_choice: "none"`: nothing is called. A call written anyway is read, and its arguments (as the JSON object the call
# would have carried, untyped: no schema) are text of its analysis segment, so
# reasoning; broken markup is dropped as ever. Markup never reaches the client.
NONE = Tools.forbidden()  # `tool_choice: "none"`: nothing may be called
UNCALLED = [
    Case(
        "none_call_is_reasoning_as_its_arguments",
        HEADER + P("city", "Paris") + "<|call|>",
        None,
        reasoning='{"city": "Paris"}',
        tools=NONE,
    ),
    Case(
        "none_analysis_call_and_final_in_order",
        ANALYSIS
        + header(later=True)
        + P("city", "Paris")
        + P("days", "2")
        + "<|end|>"
        + FINAL
        + "Hi",
        "Hi",
        reasoning='Need the weather.{"city": "Paris", "days": "2"}',
        tools=NONE,
    ),
    Case(
        "none_unterminated_complete_body",
        HEADER + P("city", " Montréal "),
        None,
        reasoning='{"city": " Montréal "}',
        tools=NONE,
    ),
    Case(
        "none_two_calls",
        HEADER + P("city", "Paris") + "<|end|>" + header(later=True) + P("city", "Rome"),
        None,
        reasoning='{"city": "Paris"}{"city": "Rome"}',
        tools=NONE,
    ),
    Case(
        "none_partial_parameter_dropped",
        ANALYSIS + header(later=True) + '<rfl:parameter name="city">Par',
        None,
        reasoning="Need the weather.",
        tools=NONE,
    ),
    Case(
        "none_broken_body_dropped",
        HEADER + "junk " + P("city", "Paris") + "<|call|>" + FINAL + "ok",
        "ok",
        tools=NONE,
    ),
    Case(
        "none_empty_call_is_an_empty_object",
        header("ping") + "<|call|>",
        None,
        reasoning="{}",
        tools=NONE,
    ),
]


@dataclass
class EosCase:
    """Model EOS under the grammar: `case.output` is the text before the retained `<|return|>`."""

    case: Case
    error: str | None = None  # a fragment of the ParseError message; None: the case's message


def eos_case(id: str, output: str, content=None, calls=(), reasoning=None, error=None) -> EosCase:
    return EosCase(beam_case(id, output, content, calls, reasoning), error)


EOS_CASES = [
    eos_case(
        "B1_analysis_and_final",
        "<|channel|>analysis<|message|>r<|end|><|channel|>final<|message|>Hi",
        "Hi",
        reasoning="r",
    ),
    eos_case("B3_call_ended_by_eos", HEADER + P("city", "Paris"), calls=[PARIS]),
    eos_case(
        "B8_partial_parameter", HEADER + '<rfl:parameter name="city">Par', error="partial parameter"
    ),
    eos_case("B9_stray_text_in_body", HEADER + "junk " + P("city", "Paris"), error="stray text"),
    eos_case(
        "B10_reserved_close_inside_value",
        header("search") + P("q", "a") + " b</rfl:parameter>",
        error="reserved parameter close tag inside the value of 'q'",
    ),
    eos_case(
        "B11_two_calls_second_ended_by_eos",
        HEADER + P("city", "Paris") + "<|end|>" + header(later=True) + P("city", "Lyon"),
        calls=[PARIS, ("weather.lookup", {"city": "Lyon"})],
    ),
    eos_case("B12_call_then_eos", HEADER + P("city", "Paris") + "<|end|>", calls=[PARIS]),
    eos_case(
        "B13_analysis_calls_final",
        ANALYSIS
        + header(later=True)
        + P("city", "Paris")
        + "<|end|>"
        + header(later=True)
        + P("city", "Rome")
        + P("days", "3")
        + "<|end|>"
        + FINAL
        + "Both forecasts are ready.",
        "Both forecasts are ready.",
        [PARIS, ("weather.lookup", {"city": "Rome", "days": 3})],
        reasoning="Need the weather.",
    ),
    # B15 (user stop id = EOS id), B16 (stop string "<|return|>") and B18 (engine
    # strips EOS but names it) reach the parser exactly as B3 does.
    eos_case("B15_user_stop_id_is_eos", HEADER + P("city", "Paris"), calls=[PARIS]),
    eos_case("B16_stop_string_never_matches_eos", HEADER + P("city", "Paris"), calls=[PARIS]),
    eos_case("B18_engine_stripped_eos", HEADER + P("city", "Paris"), calls=[PARIS]),
    eos_case("B25_undeclared_tool", header("unknown.tool") + P("a", "1"), error="undeclared tool"),
    eos_case("B3_with_whitespace_before_eos", HEADER + P("city", "Paris") + "\n ", calls=[PARIS]),
    eos_case("empty_turn", ""),
    eos_case("empty_call_at_eos", header("ping"), calls=[("ping", {})]),
    eos_case(
        "final_ended_by_end_then_eos",
        "<|channel|>final<|message|>Done.<|end|>",
        "Done.",
    ),
    eos_case(
        "text_outside_segments", "Hello " + HEADER + P("city", "Paris"), error="outside any segment"
    ),
    eos_case(
        "eos_inside_analysis",
        "<|channel|>analysis<|message|>thinking",
        error="analysis ended by the return marker",
    ),
    eos_case("eos_inside_header", " to=weather.lookup<|channel|>anal", error="header"),
    eos_case(
        "malformed_call_earlier_in_turn",
        HEADER + "junk<|end|>" + header(later=True) + P("city", "Paris"),
        error="stray text",
    ),
    eos_case(
        "unknown_channel",
        "<|channel|>commentary<|message|>hi<|end|>",
        error="neither analysis nor final",
    ),
]


def run(chunks: list[str], tools: Tools, strict: bool) -> Message:
    """Drive MessageParser as the pipeline does: strict (with the retained EOS
    text) only for model EOS under the grammar, lenient otherwise."""
    parser = make_parser(FAMILY, tools)
    pieces: list[Piece] = []
    for chunk in chunks:
        pieces.extend(parser.feed(chunk))
    if strict:
        pieces.extend(parser.finish(strict=True, eos_text=EOS))
    else:
        pieces.extend(parser.finish())
    return fold(pieces)


def check_eos(item: EosCase, chunks: list[str]) -> None:
    tools = declared_tools(item.case)
    if item.error is None:
        assert_message(run(chunks, tools, strict=True), item.case)
        return
    with pytest.raises(ParseError, match="turn grammar") as info:
        run(chunks, tools, strict=True)
    message = str(info.value)
    assert item.error in message, message
    assert "<|" not in message and "rfl:" not in message, message  # it may reach the client


globals().update(family_tests(FAMILY, CASES + UNCALLED, examples=80))


@pytest.mark.parametrize("item", EOS_CASES, ids=lambda c: c.case.id)
def test_eos_case(item: EosCase) -> None:
    check_eos(item, [item.case.output])
    check_eos(item, list(item.case.output))


@settings(max_examples=80, deadline=None)
@given(data=st.data(), item=st.sampled_from(EOS_CASES))
def test_any_split_gives_the_same_eos_outcome(data: st.DataObject, item: EosCase) -> None:
    check_eos(item, data.draw(splits(item.case.output)))


def test_B4_call_before_eos_is_the_same_strict_or_lenient() -> None:
    # The same output is a call both ways: strict gets the EOS text, lenient never does.
    output = HEADER + P("city", "Paris")
    assert run([output], Tools(TOOLS), strict=True).calls == [PARIS]
    assert run([output], Tools(TOOLS), strict=False).calls == [PARIS]


def test_B8_partial_parameter_is_not_an_error_when_lenient() -> None:
    msg = run([HEADER + '<rfl:parameter name="city">Par' + EOS], Tools(TOOLS), strict=False)
    assert (msg.content, msg.reasoning, msg.calls) == (None, None, [])


def test_B20_two_choices_parse_independently() -> None:
    b3 = HEADER + P("city", "Paris")
    b7 = ANALYSIS + header(later=True) + '<rfl:parameter name="city">Par'
    first, second = make_parser(FAMILY, Tools(TOOLS)), make_parser(FAMILY, Tools(TOOLS))
    got: list[list[Piece]] = [[], []]
    for i in range(max(len(b3), len(b7))):
        got[0].extend(first.feed(b3[i : i + 1]))
        got[1].extend(second.feed(b7[i : i + 1]))
    got[0].extend(first.finish(strict=True, eos_text=EOS))  # choice 0: MODEL_EOS
    got[1].extend(second.finish())  # choice 1: LENGTH
    assert fold(got[0]).calls == [PARIS]
    one = fold(got[1])
    assert (one.calls, one.content, one.reasoning) == ([], None, "Need the weather.")


def test_B23_split_inside_the_value() -> None:
    chunks = [HEADER + '<rfl:parameter name="city"> Montr', "é", "al </rfl:param", "eter><|call|>"]
    assert run(chunks, Tools(TOOLS), strict=False).calls == [
        ("weather.lookup", {"city": " Montréal "})
    ]


def test_declares_what_the_decoder_must_do() -> None:
    assert BeamParser.needs_special_tokens
    assert BeamParser.visible_stop_markers == ("<|call|>",)
    assert BeamParser.wants_eos_text
    assert BeamParser.handles_reasoning


def test_text_streams_and_only_a_possible_marker_is_held() -> None:
    parser = BeamParser(Tools(TOOLS))
    assert parser.feed("<|channel|>analysis<|message|>Thin") == [Reasoning("Thin")]
    assert parser.feed("king<|en") == [Reasoning("king")]
    assert parser.feed("d|><|channel|>final<|message|>Hello <") == [Content("Hello ")]
    assert parser.feed("b>") == [Content("<b>")]
    assert parser.feed(" more") == [Content(" more")]


def test_call_is_one_piece_emitted_when_closed() -> None:
    parser = BeamParser(Tools(TOOLS))
    assert parser.feed(HEADER + P("city", "Paris")) == []
    pieces = parser.feed("<|end|>")
    assert pieces == [ToolCall("weather.lookup", '{"city": "Paris"}')]


def test_no_call_goes_out_ahead_of_a_known_violation() -> None:
    parser = make_parser(FAMILY, Tools(TOOLS))
    pieces = parser.feed("stray " + HEADER + P("city", "Paris") + "<|end|>")
    assert not any(isinstance(p, ToolCall) for p in pieces)
    with pytest.raises(ParseError, match="outside any segment"):
        parser.finish(strict=True, eos_text=EOS)


def test_held_call_is_released_when_lenient() -> None:
    msg = run(["stray" + HEADER + P("city", "Paris") + "<|end|>"], Tools(TOOLS), strict=False)
    assert (msg.content, msg.calls) == ("stray", [PARIS])


def test_no_marker_ever_reaches_content_or_reasoning() -> None:
    for case in CASES:
        msg = parse_chunks(FAMILY, list(case.output), declared_tools(case))
        for text in (msg.content or "", msg.reasoning or ""):
            for marker in ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", EOS):
                assert marker not in text, (case.id, text)
            assert "<rfl:parameter name=" not in text, (case.id, text)


def test_under_none_nothing_is_called_and_nothing_is_held() -> None:
    """`tool_choice: "none"`: the call goes out as reasoning when it closes, even
    after a deviation (which would hold a call back), never as a call."""
    parser = make_parser(FAMILY, Tools.forbidden())
    assert parser.feed("stray" + HEADER + P("city", "Paris")) == [Content("stray")]
    assert parser.feed("<|end|>") == [Reasoning('{"city": "Paris"}')]
    assert parser.finish() == []


def test_without_tools_a_call_is_returned_at_the_end_as_one_to_an_undeclared_tool() -> None:
    """No tools and no `none` (docs/beam.md): the call is read and held (a call
    to an undeclared tool is a deviation), then returned at the end."""
    msg = run([HEADER + P("city", "Paris") + "<|call|>"], Tools(), strict=False)
    assert msg.calls == [PARIS]
