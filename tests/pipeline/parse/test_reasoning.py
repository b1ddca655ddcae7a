"""Reasoning parsers, from their formats: every name in the registry, whole,
one character at a time, split at random, alone and in front of a tool parser.

Whitespace convention (decided here, as vLLM does it): the parser never trims.
Text after the end tag is content as written (Qwen3's "\\n\\n" after `</think>`
stays at the front of content, like vLLM's `partition`), text after the start
tag is reasoning as written. The one thing dropped is whitespace before a start
tag that opens the output. Keeping text verbatim is what makes the result
independent of how the stream is split, and a non-streaming response the fold
of the stream.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rotor.pipeline.parse.base import Content, Reasoning, ToolCall, Tools
from rotor.pipeline.parse.constrained import NamedToolParser
from rotor.pipeline.parse.message import MessageParser
from rotor.pipeline.parse.reasoning import REASONING_PARSERS, reasoning_parser
from rotor.pipeline.parse.tools import tool_parser

from support.parsing import Message, parse_chunks, splits

# Written from the spec, not read back from the code: name → (start, end, starts inside).
FORMATS: dict[str, tuple[str, str, bool]] = {
    "think": ("<think>", "</think>", False),
    "qwen3": ("<think>", "</think>", False),
    "deepseek_r1": ("<think>", "</think>", True),
    "glm45": ("<think>", "</think>", False),
    "kimi_k25": ("<think>", "</think>", False),
    "mistral": ("[THINK]", "[/THINK]", False),
    "granite": ("Here is my thought process:", "Here is my response:", False),
    "kimi": ("◁think▷", "◁/think▷", False),
    "nemotron3": ("<think>", "</think>", False),
    "hunyuan": ("<think>\n", "\n</think>\n<answer>\n", False),
    "gemma4": ("<|channel>", "<channel|>", False),
}
# Other spellings of a tag (granite writes "Here's" too), the label written
# after a start tag (Gemma 4's channel name) and the answer frame dropped from
# content (Hunyuan): name → (more start tags, more end tags, label, drops).
EXTRAS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str, tuple[str, ...]]] = {
    "granite": (("Here's my thought process:",), ("Here's my response:",), "", ()),
    # Hunyuan also writes plain `<think>…</think>` (SGLang's hunyuan detector).
    "hunyuan": (("<think>",), ("</think>",), "", ("<answer>\n", "\n</answer>")),
    "gemma4": ((), (), "thought\n", ()),
}
# Where each family's tool calls begin, as its peers end reasoning there with no
# tool parser set (vLLM: vllm/reasoning/kimi_k2_reasoning_parser.py and the
# qwen3 / glm47_moe / nemotron_v3 / mistral / gemma4 parser configs; SGLang:
# srt/parser/reasoning_parser.py's `tool_start_token`): the section goes to content.
CALL_STARTS: dict[str, tuple[str, ...]] = {
    "qwen3": ("<tool_call>",),
    "glm45": ("<tool_call>",),
    "nemotron3": ("<tool_call>",),
    "kimi_k25": ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"),
    "mistral": ("[TOOL_CALLS]",),
    "gemma4": ("<|tool_call>",),
    "hunyuan": ("<tool_calls>",),
}
NAMES = sorted(FORMATS)


def tags(name: str) -> tuple[tuple[str, ...], tuple[str, ...], str, tuple[str, ...]]:
    """Every start tag, every end tag, the label and the content drops of a format."""
    s, e, _ = FORMATS[name]
    more_s, more_e, label, drops = EXTRAS.get(name, ((), (), "", ()))
    return (s, *more_s), (e, *more_e), label, drops


def first(text: str, markers: tuple[str, ...]) -> tuple[int, str | None]:
    found = [(text.find(m), -len(m), m) for m in markers if m in text]
    if not found:
        return -1, None
    i, _, m = min(found)
    return i, m


NO_TOOLS = Tools()


def parse(name: str, chunks: list[str], inside: bool = False) -> tuple[str | None, str | None]:
    """(reasoning, content) folded from the reasoning parser alone."""
    msg = parse_chunks(None, chunks, NO_TOOLS, name, inside)
    assert not msg.calls
    return msg.reasoning, msg.content


def every_way(name: str, output: str, inside: bool = False) -> tuple[str | None, str | None]:
    """Whole and one character at a time must agree; returns the result."""
    whole = parse(name, [output], inside)
    assert parse(name, list(output), inside) == whole, output
    return whole


def reference(name: str, output: str, inside: bool = False) -> tuple[str | None, str | None]:
    """The format read over the whole text at once (what any split must fold to),
    no tool parser behind: inside a block, a call start with no end tag after it
    ends the reasoning, and the rest is content from the marker on."""
    starts, ends, label, drops = tags(name)
    exits = CALL_STARTS.get(name, ())
    inside = inside or FORMATS[name][2]
    reasoning: list[str] = []
    content: list[str] = []
    head = output.lstrip()
    opening = next((t for t in starts if head.startswith(t)), None)
    if opening is not None:
        output, inside = head[len(opening) :], True
    pending = inside
    while output:
        if pending and label and output.startswith(label):
            output = output[len(label) :]
        pending = False
        i, tag = first(output, (*ends, *exits) if inside else (*starts, *drops))
        if tag in exits and tag not in ends:
            j, end = first(output[i + len(tag) :], ends)
            if end is None:  # never closed: content from the call on
                reasoning.append(output[:i])
                content.append(output[i:])
                break
            i, tag = i + len(tag) + j, end  # closed later: all of it was reasoning
        (reasoning if inside else content).append(output if tag is None else output[:i])
        if tag is None:
            break
        output = output[i + len(tag) :]
        if inside:
            inside = False
        elif tag in starts:
            inside = pending = True
    return "".join(reasoning) or None, "".join(content) or None


# -- the registry -----------------------------------------------------------------------


def test_registry_holds_exactly_the_specified_names() -> None:
    assert sorted(REASONING_PARSERS) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_tags_and_start_state_match_the_format(name: str) -> None:
    start, end, starts_inside = FORMATS[name]
    cls = reasoning_parser(name)
    assert cls.name == name
    assert (cls.start_tag, cls.end_tag, cls.starts_inside) == (start, end, starts_inside)
    starts, ends, label, drops = tags(name)
    assert (cls.start_tags, cls.end_tags, cls.label, cls.content_drops) == (
        starts,
        ends,
        label,
        drops,
    )
    assert cls(False).inside is starts_inside
    assert cls(True).inside is True
    assert cls.call_starts == CALL_STARTS.get(name, ())


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError) as err:
        reasoning_parser("nope")
    message = str(err.value)
    assert "nope" in message
    for name in NAMES:
        assert name in message


# -- cases from the format, for every parser ---------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_reasoning_then_content(name: str) -> None:
    s, e, _ = FORMATS[name]
    assert every_way(name, f"{s}Let me think.{e}The answer is 4.") == (
        "Let me think.",
        "The answer is 4.",
    )


@pytest.mark.parametrize("name", NAMES)
def test_no_reasoning_at_all(name: str) -> None:
    _, _, starts_inside = FORMATS[name]
    text = "Just an answer, no thinking."
    expected = (text, None) if starts_inside else (None, text)
    assert every_way(name, text) == expected


@pytest.mark.parametrize("name", NAMES)
def test_plain_text_streams_one_piece_per_feed(name: str) -> None:
    """No tag can start: every delta goes straight out, in one piece, unbuffered."""
    _, _, starts_inside = FORMATS[name]
    kind = Reasoning if starts_inside else Content
    parser = reasoning_parser(name)(False)
    starts, ends, _, drops = tags(name)
    # Hunyuan's markers begin with a newline: there a newline may begin one.
    firsts = {t[0] for t in (*starts, *ends, *drops)}
    deltas = ["Sure", ", the", " answer", " is", " 4.", " Grüße", " 東京 🙂", "\n", "done"]
    for delta in [d for d in deltas if d[0] not in firsts]:
        assert parser.feed(delta) == [kind(delta)], delta
    assert parser.finish() == []


@pytest.mark.parametrize("name", NAMES)
def test_content_after_a_block_streams_one_piece_per_feed(name: str) -> None:
    s, e, _ = FORMATS[name]
    parser = reasoning_parser(name)(False)
    assert parser.feed(f"{s}thought{e}") == [Reasoning("thought")]
    for delta in ["The", " answer", " is", " 4.", " 東京 🙂"]:
        assert parser.feed(delta) == [Content(delta)], delta
    assert parser.finish() == []


@pytest.mark.parametrize("name", NAMES)
def test_starting_inside_without_the_start_tag(name: str) -> None:
    """The prompt ended with the start tag: the model writes reasoning first."""
    _, e, _ = FORMATS[name]
    assert every_way(name, f"I should add.{e}4", inside=True) == ("I should add.", "4")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lead", ["", "\n", " \n\n"])
def test_starting_inside_with_the_model_repeating_the_start_tag(name: str, lead: str) -> None:
    s, e, _ = FORMATS[name]
    assert every_way(name, f"{lead}{s}I should add.{e}4", inside=True) == ("I should add.", "4")


@pytest.mark.parametrize("name", NAMES)
def test_starting_inside_and_closing_at_once(name: str) -> None:
    _, e, _ = FORMATS[name]
    assert every_way(name, f"{e}Only an answer.", inside=True) == (None, "Only an answer.")


@pytest.mark.parametrize("name", NAMES)
def test_unterminated_reasoning_stays_reasoning(name: str) -> None:
    """Cut off while thinking: all of it is reasoning, including a partial end tag
    (the longest that holds no other spelling: Hunyuan's frame holds `</think>`)."""
    s, e, _ = FORMATS[name]
    _, ends, _, _ = tags(name)
    partial = next(e[:n] for n in range(len(e) - 1, 0, -1) if not any(t in e[:n] for t in ends))
    assert every_way(name, f"{s}step one, step two") == ("step one, step two", None)
    assert every_way(name, f"{s}step one{partial}") == ("step one" + partial, None)
    assert every_way(name, f"step one{partial}", inside=True) == ("step one" + partial, None)


@pytest.mark.parametrize("name", NAMES)
def test_start_tag_alone_is_empty_reasoning(name: str) -> None:
    s, e, _ = FORMATS[name]
    assert every_way(name, s) == (None, None)
    assert every_way(name, f"{s}{e}") == (None, None)
    assert every_way(name, f"{s}{e}answer") == (None, "answer")


@pytest.mark.parametrize("name", NAMES)
def test_a_partial_start_tag_at_the_end_is_released(name: str) -> None:
    """Held back while it could be a tag, then released: nothing is lost. (A
    prefix that is a spelling of its own, Hunyuan's `<think>`, is a tag.)"""
    s, _, starts_inside = FORMATS[name]
    starts, _, _, _ = tags(name)
    for n in (n for n in range(1, len(s)) if s[:n] not in starts):
        text = f"answer {s[:n]}"
        expected = (text, None) if starts_inside else (None, text)
        assert every_way(name, text) == expected
        alone = s[:n]
        expected = (alone, None) if starts_inside else (None, alone)
        assert every_way(name, alone) == expected


@pytest.mark.parametrize("name", NAMES)
def test_tags_split_at_every_position(name: str) -> None:
    s, e, _ = FORMATS[name]
    output = f"{s}abc{e}def"
    for i in range(1, len(output)):
        for j in range(i + 1, len(output) + 1):
            chunks = [output[:i], output[i:j], output[j:]]
            assert parse(name, chunks) == ("abc", "def"), chunks


@pytest.mark.parametrize("name", NAMES)
def test_text_is_held_only_while_it_could_be_a_tag(name: str) -> None:
    """Streaming: a suffix that could begin the end tag waits; the rest goes out now."""
    s, e, _ = FORMATS[name]
    parser = reasoning_parser(name)(False)
    assert parser.feed(f"{s}first") == [Reasoning("first")]
    assert parser.feed(f" then{e[:2]}") == [Reasoning(" then")]
    assert parser.feed("x") == [Reasoning(f"{e[:2]}x")]
    assert parser.feed(f"{e}answer") == [Content("answer")]
    assert parser.finish() == []


@pytest.mark.parametrize("name", NAMES)
def test_multi_byte_text_on_both_sides(name: str) -> None:
    s, e, _ = FORMATS[name]
    thought = "Grüße aus Zürich — 東京 🙂 Москва"
    answer = "Montréal 🙂 São Paulo ✓"
    assert every_way(name, f"{s}{thought}{e}{answer}") == (thought, answer)


@pytest.mark.parametrize("name", NAMES)
def test_whitespace_is_kept_verbatim_on_both_sides_of_the_end_tag(name: str) -> None:
    s, e, _ = FORMATS[name]
    assert every_way(name, f"{s}\nthink\n{e}\n\nanswer\n") == ("\nthink\n", "\n\nanswer\n")


@pytest.mark.parametrize("name", NAMES)
def test_whitespace_before_an_opening_start_tag_is_dropped(name: str) -> None:
    s, e, _ = FORMATS[name]
    assert every_way(name, f"\n \n{s}r{e}c") == ("r", "c")


@pytest.mark.parametrize("name", NAMES)
def test_leading_whitespace_of_plain_output_is_kept(name: str) -> None:
    _, _, starts_inside = FORMATS[name]
    text = "\n\n  plain"
    expected = (text, None) if starts_inside else (None, text)
    assert every_way(name, text) == expected
    expected = ("\n", None) if starts_inside else (None, "\n")
    assert every_way(name, "\n") == expected


# Hunyuan's end tag carries its answer frame (`<answer>\n`), which is dropped.
@pytest.mark.parametrize("name", [n for n in NAMES if not FORMATS[n][2] and n != "hunyuan"])
def test_a_stray_end_tag_in_content_stays_content(name: str) -> None:
    """Outside reasoning only the start tag means anything; nothing is dropped."""
    _, e, _ = FORMATS[name]
    assert every_way(name, f"a {e} b") == (None, f"a {e} b")


@pytest.mark.parametrize("name", NAMES)
def test_several_blocks_interleave_with_content(name: str) -> None:
    """Each start tag opens a block (interleaved thinking, as Dynamo parses it)."""
    s, e, starts_inside = FORMATS[name]
    assert every_way(name, f"{s}a{e}b{s}c{e}d") == ("ac", "bd")
    # A start tag written inside a block is just reasoning text.
    expected = (f"Intro {s}x", " outro") if starts_inside else ("x", "Intro  outro")
    assert every_way(name, f"Intro {s}x{e} outro") == expected


# -- family specifics ----------------------------------------------------------------------


def test_qwen3_content_keeps_the_blank_line_after_think() -> None:
    """What Qwen3 writes; vLLM's qwen3 parser keeps the "\\n\\n" too (partition)."""
    output = "<think>\nThe user says hi.\n</think>\n\nHello! How can I help?"
    assert every_way("qwen3", output) == ("\nThe user says hi.\n", "\n\nHello! How can I help?")


def test_qwen3_thinking_off_block_is_empty() -> None:
    """Qwen3 with thinking off still writes an empty block: no reasoning, content kept."""
    assert every_way("qwen3", "<think>\n\n</think>\n\nHi") == ("\n\n", "\n\nHi")


def test_deepseek_r1_starts_inside_by_default() -> None:
    assert every_way("deepseek_r1", "abc</think>def") == ("abc", "def")
    assert every_way("deepseek_r1", "<think>\nabc</think>def") == ("\nabc", "def")
    assert every_way("deepseek_r1", "still going") == ("still going", None)


def test_think_family_without_start_tag_is_content() -> None:
    """Only deepseek_r1 assumes an open block; the others need the prompt to say so."""
    for name in ("think", "qwen3", "glm45", "kimi_k25", "nemotron3"):
        assert every_way(name, "abc</think>def") == (None, "abc</think>def")
        assert every_way(name, "abc</think>def", inside=True) == ("abc", "def")


def test_granite_textual_markers() -> None:
    output = (
        "Here is my thought process:\nThe user wants 2+2.\nHere is my response:\nThe answer is 4."
    )
    assert every_way("granite", output) == ("\nThe user wants 2+2.\n", "\nThe answer is 4.")


def test_granite_near_misses_are_content() -> None:
    for text in (
        "Here is my answer: 4",
        "Here is my response: 4",  # a response marker with no thought marker
        "Here is my thought process",  # no colon
        "here is my thought process: lower case",
    ):
        assert every_way("granite", text) == (None, text), text


def test_mistral_and_kimi_tags() -> None:
    assert every_way("mistral", "[THINK]2+2[/THINK]4") == ("2+2", "4")
    assert every_way("mistral", "[TOOL_CALLS] is not [THINK") == (
        None,
        "[TOOL_CALLS] is not [THINK",
    )
    assert every_way("kimi", "◁think▷2+2◁/think▷4") == ("2+2", "4")
    assert every_way("kimi", "◁ and ▷ alone") == (None, "◁ and ▷ alone")


# -- with a tool parser: tool markers inside reasoning are reasoning -----------------------


def message(chunks: list[str], reasoning: str = "qwen3", inside: bool = False) -> Message:
    return parse_chunks("hermes", chunks, Tools({"f": {}}), reasoning, inside)


COMBINED = [
    # (output, inside, reasoning, content, calls)
    (
        '<think>I\'ll use <tool_call></think><tool_call>{"name":"f","arguments":{}}</tool_call>',
        False,
        "I'll use <tool_call>",
        None,
        [("f", {})],
    ),
    (
        '<think>\nmaybe <tool_call>{"name":"f","arguments":{"a":1}}</tool_call>\n</think>\n\n'
        '<tool_call>{"name":"f","arguments":{"a":2}}</tool_call>',
        False,
        '\nmaybe <tool_call>{"name":"f","arguments":{"a":1}}</tool_call>\n',
        None,
        [("f", {"a": 2})],
    ),
    (
        'plan <tool_call>{"name":"f","arguments":{}}</tool_call></think>Done.',
        True,
        'plan <tool_call>{"name":"f","arguments":{}}</tool_call>',
        "Done.",
        [],
    ),
    (
        '<think>r</think>Let me check.\n<tool_call>{"name":"f","arguments":{"q":"東京"}}</tool_call>',
        False,
        "r",
        "Let me check.\n",  # the shared rule: text next to a call keeps its whitespace
        [("f", {"q": "東京"})],
    ),
    # Never closed: the call ends the reasoning (issue 13, defect 5).
    (
        '<think>unterminated <tool_call>{"name":"f","arguments":{}}</tool_call>',
        False,
        "unterminated ",
        None,
        [("f", {})],
    ),
]


@pytest.mark.parametrize("output,inside,reasoning,content,calls", COMBINED)
def test_tool_markers_inside_reasoning_are_reasoning(
    output: str, inside: bool, reasoning: str, content: str | None, calls: list
) -> None:
    for chunks in ([output], list(output)):
        msg = message(chunks, inside=inside)
        assert (msg.reasoning, msg.content, msg.calls) == (reasoning, content, calls)


def test_reasoning_streams_before_a_call_completes() -> None:
    """Reasoning with a tool marker in it goes out at once, not held by the tool parser."""
    parser = MessageParser(
        reasoning_parser("qwen3")(False), tool_parser("hermes")(Tools({"f": {}}))
    )
    # `<tool_call>` could still open a call (`<tool_call>{`): held, then released.
    assert parser.feed("<think>use <tool_call>") == [Reasoning("use ")]
    assert parser.feed(" now") == [Reasoning("<tool_call> now")]
    assert parser.feed("</think>") == []
    pieces = parser.feed('<tool_call>{"name":"f","arguments":{}}</tool_call>') + parser.finish()
    assert [(type(p), getattr(p, "name", None)) for p in pieces] == [(ToolCall, "f")]


@settings(max_examples=40, deadline=None)
@given(data=st.data(), case=st.sampled_from(COMBINED))
def test_combined_any_split_gives_the_same_message(data: st.DataObject, case: tuple) -> None:
    output, inside, reasoning, content, calls = case
    msg = message(data.draw(splits(output)), inside=inside)
    assert (msg.reasoning, msg.content, msg.calls) == (reasoning, content, calls)


# -- a call started inside a think block that is never closed (issue 13, defect 5) --------


def qwen_call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


KIMI_CALL = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
)
GLM_CALL = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
WEATHER = [("get_weather", {"city": "Paris"})]

# (reasoning parser, tool family, output, inside, reasoning, content, calls)
EXITS = [
    # Qwen3.5 (qwen3_coder calls) on a long context: no `</think>` before the call.
    (
        "qwen3",
        "qwen3_coder",
        "<think>The user wants the weather.\n" + qwen_call("get_weather", city="Paris"),
        False,
        "The user wants the weather.\n",
        None,
        WEATHER,
    ),
    # The prompt opened the block (Qwen3.5 templates end with `<think>\n`).
    (
        "qwen3",
        "qwen3_coder",
        "Need the weather. " + qwen_call("get_weather", city="Paris") + "\nDone.",
        True,
        "Need the weather. ",
        "\nDone.",
        WEATHER,
    ),
    # Prose that mentions the tag, not followed by `<function=`: still reasoning.
    (
        "qwen3",
        "qwen3_coder",
        "<think>I will emit a <tool_call> block next, with <function= inside",
        False,
        "I will emit a <tool_call> block next, with <function= inside",
        None,
        [],
    ),
    # A call written inside a block that is closed later stays reasoning.
    (
        "qwen3",
        "qwen3_coder",
        "<think>draft: "
        + qwen_call("get_weather", city="Oslo")
        + "\nno.</think>"
        + qwen_call("get_weather", city="Paris"),
        False,
        "draft: " + qwen_call("get_weather", city="Oslo") + "\nno.",
        None,
        WEATHER,
    ),
    # Kimi K2.5: the section marker inside unclosed thinking.
    (
        "kimi_k25",
        "kimi_k2",
        "<think>I should look it up." + KIMI_CALL,
        False,
        "I should look it up.",
        None,
        WEATHER,
    ),
    # GLM-4.7: `<tool_call>name<arg_key>…` before `</think>` was written.
    (
        "glm45",
        "glm45",
        "<think>Checking Paris." + GLM_CALL,
        False,
        "Checking Paris.",
        None,
        WEATHER,
    ),
    # Hermes-style calls (Qwen3): the marker must be followed by the JSON call.
    (
        "qwen3",
        "hermes",
        '<think>ok\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call>",
        False,
        "ok\n",
        None,
        WEATHER,
    ),
]


@pytest.mark.parametrize("reasoning,family,output,inside,thought,content,calls", EXITS)
def test_a_call_in_an_unclosed_think_block_ends_the_reasoning(
    reasoning: str,
    family: str,
    output: str,
    inside: bool,
    thought: str,
    content: str | None,
    calls: list,
) -> None:
    tools = Tools({"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}})
    for chunks in ([output], list(output)):
        msg = parse_chunks(family, chunks, tools, reasoning, inside)
        assert (msg.reasoning, msg.content, msg.calls) == (thought, content, calls), chunks


@settings(max_examples=60, deadline=None)
@given(data=st.data(), case=st.sampled_from(EXITS))
def test_exits_any_split_gives_the_same_message(data: st.DataObject, case: tuple) -> None:
    reasoning, family, output, inside, thought, content, calls = case
    tools = Tools({"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}})
    msg = parse_chunks(family, data.draw(splits(output)), tools, reasoning, inside)
    assert (msg.reasoning, msg.content, msg.calls) == (thought, content, calls)


def test_reasoning_before_the_exit_streams_and_the_rest_waits_for_the_end() -> None:
    parser = MessageParser(
        reasoning_parser("qwen3")(False), tool_parser("qwen3_coder")(Tools({"f": {}}))
    )
    assert parser.feed("<think>plan") == [Reasoning("plan")]
    assert parser.feed(" <tool_call>\n<function=f>\n") == [Reasoning(" ")]
    assert parser.feed("</function>\n</tool_call>") == []  # could still be closed
    pieces = parser.finish()
    assert [(type(p), getattr(p, "name", None)) for p in pieces] == [(ToolCall, "f")]


# -- no tool parser set: the family's own call start ends an unclosed block ---------------


@pytest.mark.parametrize("name", [n for n in NAMES if n not in CALL_STARTS])
def test_without_a_tool_parser_and_without_call_starts_nothing_exits(name: str) -> None:
    """deepseek_r1, granite, kimi, think: their peers end reasoning at no call marker."""
    s, _, _ = FORMATS[name]
    output = f"{s}x " + qwen_call("f", a="1") + KIMI_CALL
    assert every_way(name, output) == ("x " + qwen_call("f", a="1") + KIMI_CALL, None)


# (reasoning parser, output, inside, reasoning, content): what the model wrote,
# as the family writes its calls.
ALONE = [
    # Qwen3.5: `<tool_call>` before `</think>`; the section is content, marker included.
    (
        "qwen3",
        "<think>The user wants the weather.\n" + qwen_call("get_weather", city="Paris"),
        False,
        "The user wants the weather.\n",
        qwen_call("get_weather", city="Paris"),
    ),
    # Hermes-style body: any `<tool_call>` ends it (vLLM's engine and SGLang alike).
    (
        "qwen3",
        '<think>ok\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
        False,
        "ok\n",
        '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
    ),
    # The prompt opened the block; text after the call stays with the section.
    (
        "qwen3",
        "Need it. " + qwen_call("f", a="1") + "\nDone.",
        True,
        "Need it. ",
        qwen_call("f", a="1") + "\nDone.",
    ),
    # An end tag after the call: it was reasoning after all.
    (
        "qwen3",
        "<think>draft " + qwen_call("f", a="1") + " no.</think>Answer.",
        False,
        "draft " + qwen_call("f", a="1") + " no.",
        "Answer.",
    ),
    ("glm45", "<think>Checking Paris." + GLM_CALL, False, "Checking Paris.", GLM_CALL),
    ("kimi_k25", "<think>Look it up." + KIMI_CALL, False, "Look it up.", KIMI_CALL),
    (
        "kimi_k25",
        "<think>typo<|tool_call_section_begin|>x",
        False,
        "typo",
        "<|tool_call_section_begin|>x",
    ),
    ("nemotron3", "plan\n" + qwen_call("f", a="1"), True, "plan\n", qwen_call("f", a="1")),
    (
        "mistral",
        '[THINK]2+2?[TOOL_CALLS]add[ARGS]{"a": 2}',
        False,
        "2+2?",
        '[TOOL_CALLS]add[ARGS]{"a": 2}',
    ),
    (
        "gemma4",
        "<|channel>thought\nweather<|tool_call>call:w{}<tool_call|>",
        False,
        "weather",
        "<|tool_call>call:w{}<tool_call|>",
    ),
    (
        "hunyuan",
        '<think>\nneed it<tool_calls>[{"name": "f"}]</tool_calls>',
        False,
        "need it",
        '<tool_calls>[{"name": "f"}]</tool_calls>',
    ),
    # Outside reasoning a call marker means nothing to the reasoning parser.
    (
        "qwen3",
        "<think>r</think>a " + qwen_call("f", a="1"),
        False,
        "r",
        "a " + qwen_call("f", a="1"),
    ),
    # Prose that names the marker in a block cut off still ends it there (as the peers do).
    (
        "qwen3",
        "<think>I will emit a <tool_call> block",
        False,
        "I will emit a ",
        "<tool_call> block",
    ),
]


@pytest.mark.parametrize("name,output,inside,thought,content", ALONE)
def test_without_a_tool_parser_the_call_section_is_content(
    name: str, output: str, inside: bool, thought: str, content: str
) -> None:
    assert every_way(name, output, inside) == (thought, content)
    assert reference(name, output, inside) == (thought, content)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), case=st.sampled_from(ALONE))
def test_alone_any_split_gives_the_same_message(data: st.DataObject, case: tuple) -> None:
    name, output, inside, thought, content = case
    assert parse(name, data.draw(splits(output)), inside) == (thought, content)


def test_alone_reasoning_streams_and_the_section_waits_for_the_end() -> None:
    parser = MessageParser(reasoning_parser("kimi_k25")(False))
    assert parser.feed("<think>plan") == [Reasoning("plan")]
    assert parser.feed(" <|tool_calls_sec") == [Reasoning(" ")]  # could be the marker
    assert parser.feed("tion_begin|><|tool_call_begin|>") == []  # held: `</think>` may follow
    assert parser.feed("functions.f:0") == []
    assert parser.finish() == [
        Content("<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0")
    ]


def test_a_tool_parser_behind_replaces_the_family_call_starts() -> None:
    """qwen3 alone exits at `<tool_call>`; with qwen3_coder behind only at its own
    call starts (`<tool_call>` then `<function=`), and a parser with none (a named
    tool_choice's arguments reader) disables them."""
    prose = "<think>I will emit a <tool_call> block next"
    assert parse("qwen3", [prose]) == ("I will emit a ", "<tool_call> block next")
    with_coder = parse_chunks("qwen3_coder", [prose], Tools({"f": {}}), "qwen3")
    assert (with_coder.reasoning, with_coder.content) == (
        "I will emit a <tool_call> block next",
        None,
    )
    named = MessageParser(reasoning_parser("qwen3")(False), NamedToolParser(Tools({"f": {}}), "f"))
    pieces = named.feed(prose + qwen_call("f", a="1")) + named.finish()
    assert "".join(p.text for p in pieces if isinstance(p, Reasoning)) == prose[7:] + qwen_call(
        "f", a="1"
    )


# -- families: granite's two spellings, gemma4's channel label, hunyuan's frame ----------


@pytest.mark.parametrize(
    "output,expected",
    [
        (
            "Here's my thought process:\nadd them\nHere's my response:\n4",
            ("\nadd them\n", "\n4"),
        ),
        ("Here is my thought process: a Here's my response: b", (" a ", " b")),
        ("Here's my thought process: a Here is my response: b", (" a ", " b")),
        ("Here's my response: just this", (None, "Here's my response: just this")),
    ],
)
def test_granite_accepts_both_spellings_in_any_mix(output: str, expected: tuple) -> None:
    assert every_way("granite", output) == expected


def test_gemma4_drops_the_thought_channel_label() -> None:
    output = "<|channel>thought\nThe user asks 2+2.<channel|>The answer is 4."
    assert every_way("gemma4", output) == ("The user asks 2+2.", "The answer is 4.")
    # Without the label the text is all reasoning; the label only counts first.
    assert every_way("gemma4", "<|channel>thinking<channel|>x") == ("thinking", "x")
    assert every_way("gemma4", "<|channel>a thought\n<channel|>x") == ("a thought\n", "x")


def test_hunyuan_answer_frame_is_dropped() -> None:
    output = "<think>\nadd 2 and 2\n</think>\n<answer>\nIt is 4.\n</answer>"
    assert every_way("hunyuan", output) == ("add 2 and 2", "It is 4.")
    fast = "<think>\n\n</think>\n<answer>\nHi\n</answer>"
    assert every_way("hunyuan", fast) == (None, "Hi")


def test_hunyuan_reads_both_spellings() -> None:
    """A13B frames its answer (`<think>\\n…\\n</think>\\n<answer>\\n…`), SGLang's
    vectors write plain `<think>…</think>`; the longer spelling wins where both fit."""
    assert every_way("hunyuan", "<think>plain</think>answer") == ("plain", "answer")
    assert every_way("hunyuan", "<think>\nplan\n</think>\nanswer") == ("plan\n", "\nanswer")
    assert every_way("hunyuan", "<think>plan\n</think>\n<answer>\nHi\n</answer>") == (
        "plan",
        "Hi",
    )
    # SGLang's streamed chunks
    assert parse("hunyuan", ["<think>", "reasoning content", "</think>answer"]) == (
        "reasoning content",
        "answer",
    )
    assert parse("hunyuan", ["<think>", "reasoning", "<tool_calls>", "<tool_call>func"]) == (
        "reasoning",
        "<tool_calls><tool_call>func",
    )


def test_hunyuan_holds_a_plain_tag_that_may_grow_into_the_frame() -> None:
    """`<think>` may still be A13B's `<think>\\n`, `\\n</think>` its `\\n</think>\\n<answer>\\n`."""
    parser = reasoning_parser("hunyuan")(False)
    assert parser.feed("<think>") == []
    assert parser.feed("\nplan\n</think>") == [Reasoning("plan")]
    assert parser.feed("\n<answer>\nIt is 4.") == [Content("It is 4.")]
    assert parser.feed("\n</answer>") == []
    assert parser.finish() == []
    parser = reasoning_parser("hunyuan")(False)
    assert parser.feed("<think>") == []
    assert parser.finish() == []  # the start tag alone: empty reasoning


def test_nemotron3_starts_inside_only_where_the_prompt_opened_the_block() -> None:
    """Nemotron 3's template ends the prompt with `<think>\\n` when thinking is on
    (the prompt rule starts the parser inside) and `<think></think>` when off:
    then a plain answer is content (tests/pipeline/test_preprocess_reasoning.py)."""
    assert every_way("nemotron3", "plan</think>answer", inside=True) == ("plan", "answer")
    assert every_way("nemotron3", "still thinking", inside=True) == ("still thinking", None)
    assert every_way("nemotron3", "<think>\nplan\n</think>\nanswer") == ("\nplan\n", "\nanswer")
    assert every_way("nemotron3", "Just the answer.") == (None, "Just the answer.")


# -- SGLang's own vectors (test/srt/test_reasoning_parser.py) --------------------------------

# (parser, output, inside, reasoning, content): SGLang's detector tests, as
# rotor reads them. SGLang's `force_reasoning=True` is rotor's start inside
# (the prompt opened the block); its streamed cases are the same outputs,
# split at any points below. Where SGLang only checks that content holds the
# call marker, rotor's content is the whole section, as the model wrote it.
SGLANG = [
    # Glm45Detector(force_reasoning=True), test_forced_reasoning_mode
    ("glm45", "This is reasoning", True, "This is reasoning", None),
    ("glm45", "More reasoning<tool_call>tool call", True, "More reasoning", "<tool_call>tool call"),
    # Glm45Detector(), the tool interrupt
    (
        "glm45",
        "<think>I need to think<tool_call>tool call data",
        False,
        "I need to think",
        "<tool_call>tool call data",
    ),
    (
        "glm45",
        "<think>thinking<tool_call>first tool<tool_call>second tool<tool_call>final tool",
        False,
        "thinking",
        "<tool_call>first tool<tool_call>second tool<tool_call>final tool",
    ),
    ("glm45", "<think><tool_call>tool call", False, None, "<tool_call>tool call"),
    # HunyuanDetector(): plain `<think>…</think>`, no answer frame
    (
        "hunyuan",
        "<think>Let me think about this</think>The answer is 42.",
        False,
        "Let me think about this",
        "The answer is 42.",
    ),
    ("hunyuan", "Direct answer without thinking.", False, None, "Direct answer without thinking."),
    ("hunyuan", "<think>reasoning content</think>answer", False, "reasoning content", "answer"),
    (
        "hunyuan",
        "<think>I need to check<tool_calls><tool_call>get_weather<tool_sep></tool_call></tool_calls>",
        False,
        "I need to check",
        "<tool_calls><tool_call>get_weather<tool_sep></tool_call></tool_calls>",
    ),
    (
        "hunyuan",
        "<think>reasoning<tool_calls><tool_call>func",
        False,
        "reasoning",
        "<tool_calls><tool_call>func",
    ),
    # Nemotron3Detector(): thinking is not forced (the template decides)
    (
        "nemotron3",
        "<think>Let me think about this</think>The answer is 42.",
        False,
        "Let me think about this",
        "The answer is 42.",
    ),
    (
        "nemotron3",
        "Direct answer without thinking.",
        False,
        None,
        "Direct answer without thinking.",
    ),
    (
        "nemotron3",
        "<think>All reasoning, no answer</think>",
        False,
        "All reasoning, no answer",
        None,
    ),
]


@pytest.mark.parametrize("name,output,inside,thought,content", SGLANG)
def test_sglang_vectors(name: str, output: str, inside: bool, thought: str, content: str) -> None:
    assert every_way(name, output, inside) == (thought, content)
    assert reference(name, output, inside) == (thought, content)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), case=st.sampled_from(SGLANG))
def test_sglang_vectors_any_split(data: st.DataObject, case: tuple) -> None:
    name, output, inside, thought, content = case
    assert parse(name, data.draw(splits(output)), inside) == (thought, content)


def test_glm45_forced_reasoning_hands_the_call_to_the_tool_parser() -> None:
    """The prompt opened the block (GLM-4.7's template ends with `<think>`): a
    call the model starts before `</think>` ends the reasoning and is the
    glm45 tool parser's; text there that is no call comes back as content."""
    tools = Tools({"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}})
    for output, content, calls in (
        ("More reasoning<tool_call>tool call", "<tool_call>tool call", []),
        ("More reasoning" + GLM_CALL, None, WEATHER),
    ):
        for chunks in ([output], list(output)):
            msg = parse_chunks("glm45", chunks, tools, "glm45", inside=True)
            assert (msg.reasoning, msg.content, msg.calls) == ("More reasoning", content, calls)


# -- properties: generated outputs, random splits -------------------------------------------


def outputs(name: str) -> st.SearchStrategy[str]:
    """Outputs built from the format's tags and call starts, their prefixes and tricky text."""
    s, e, _ = FORMATS[name]
    starts, ends, label, drops = tags(name)
    exits = CALL_STARTS.get(name, ())
    extra = [t for t in (*starts, *ends, *drops, label, *exits) if t and t not in (s, e)]
    partial_exits = [x[:n] for x in exits for n in range(1, len(x))]
    pieces = st.one_of(
        st.sampled_from([s, e, s, e, " ", "\n", "\n\n", *extra]),
        st.integers(1, len(s) - 1).map(lambda n: s[:n]),
        st.integers(1, len(e) - 1).map(lambda n: e[:n]),
        st.sampled_from(partial_exits or [" "]),
        st.text(alphabet=st.sampled_from(sorted(set(s + e + label + "ab é東🙂\n"))), max_size=8),
    )
    return st.lists(pieces, max_size=8).map("".join)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=100, deadline=None)
@given(data=st.data(), inside=st.booleans())
def test_any_split_folds_to_the_format(name: str, data: st.DataObject, inside: bool) -> None:
    output = data.draw(outputs(name))
    chunks = data.draw(splits(output))
    expected = reference(name, output, inside)
    assert parse(name, [output], inside) == expected
    assert parse(name, chunks, inside) == expected


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_nothing_is_lost(name: str, data: st.DataObject) -> None:
    """Without tags in the text, reasoning + content is the output itself."""
    starts, ends, _, drops = tags(name)
    output = data.draw(st.text(max_size=30))
    assume(not any(t in output for t in (*starts, *ends, *drops)))
    reasoning, content = parse(name, data.draw(splits(output)))
    assert (reasoning or "") + (content or "") == output
