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
}
NAMES = sorted(FORMATS)
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
    """The format read over the whole text at once (what any split must fold to)."""
    start, end, starts_inside = FORMATS[name]
    inside = inside or starts_inside
    reasoning: list[str] = []
    content: list[str] = []
    head = output.lstrip()
    if head.startswith(start):
        output, inside = head[len(start) :], True
    while output:
        tag = end if inside else start
        i = output.find(tag)
        (reasoning if inside else content).append(output if i < 0 else output[:i])
        if i < 0:
            break
        output, inside = output[i + len(tag) :], not inside
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
    assert cls(False).inside is starts_inside
    assert cls(True).inside is True


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
    for delta in ["Sure", ", the", " answer", " is", " 4.", " Grüße", " 東京 🙂", "\n", "done"]:
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
    """Cut off while thinking: all of it is reasoning, including a partial end tag."""
    s, e, _ = FORMATS[name]
    partial = e[:-1]
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
    """Held back while it could be a tag, then released: nothing is lost."""
    s, _, starts_inside = FORMATS[name]
    for n in range(1, len(s)):
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


@pytest.mark.parametrize("name", [n for n in NAMES if not FORMATS[n][2]])
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
    for name in ("think", "qwen3", "glm45", "kimi_k25"):
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
    (
        '<think>unterminated <tool_call>{"name":"f","arguments":{}}</tool_call>',
        False,
        'unterminated <tool_call>{"name":"f","arguments":{}}</tool_call>',
        None,
        [],
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
    assert parser.feed("<think>use <tool_call>") == [Reasoning("use <tool_call>")]
    assert parser.feed(" now") == [Reasoning(" now")]
    assert parser.feed("</think>") == []
    pieces = parser.feed('<tool_call>{"name":"f","arguments":{}}</tool_call>') + parser.finish()
    assert [(type(p), getattr(p, "name", None)) for p in pieces] == [(ToolCall, "f")]


@settings(max_examples=40, deadline=None)
@given(data=st.data(), case=st.sampled_from(COMBINED))
def test_combined_any_split_gives_the_same_message(data: st.DataObject, case: tuple) -> None:
    output, inside, reasoning, content, calls = case
    msg = message(data.draw(splits(output)), inside=inside)
    assert (msg.reasoning, msg.content, msg.calls) == (reasoning, content, calls)


# -- properties: generated outputs, random splits -------------------------------------------


def outputs(name: str) -> st.SearchStrategy[str]:
    """Outputs built from the format's tags, their prefixes and tricky text."""
    s, e, _ = FORMATS[name]
    pieces = st.one_of(
        st.sampled_from([s, e, s, e, " ", "\n", "\n\n"]),
        st.integers(1, len(s) - 1).map(lambda n: s[:n]),
        st.integers(1, len(e) - 1).map(lambda n: e[:n]),
        st.text(alphabet=st.sampled_from(sorted(set(s + e + "ab é東🙂\n"))), max_size=8),
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
    s, e, _ = FORMATS[name]
    output = data.draw(st.text(max_size=30))
    assume(s not in output and e not in output)
    reasoning, content = parse(name, data.draw(splits(output)))
    assert (reasoning or "") + (content or "") == output
