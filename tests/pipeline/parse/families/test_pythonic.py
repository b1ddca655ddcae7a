"""pythonic, from its format: a Python list of keyword-argument calls at the
head of the output, `[f(a=1), g()]`, optionally wrapped in Llama 4's
`<|python_start|>` … `<|python_end|>`. Values are literals, read, never run."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rotor.pipeline.parse.base import Content, Piece, ToolCall, Tools
from rotor.pipeline.parse.tools import tool_parser

from support.parsing import Case, family_tests, splits

FAMILY = "pythonic"
START = "<|python_start|>"
END = "<|python_end|>"

CASES = [
    Case(
        "one_call",
        '[get_weather(city="San Francisco", unit="celsius")]',
        None,
        [("get_weather", {"city": "San Francisco", "unit": "celsius"})],
    ),
    Case(
        "parallel",
        "[a(x=1), b(y=[1, 2])]",
        None,
        [("a", {"x": 1}), ("b", {"y": [1, 2]})],
    ),
    Case(
        "llama4_wrapped",
        START + '[get_weather(city="Paris")]' + END,
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    Case(
        "text_before_wrapped_and_after",
        "Let me look.\n" + START + "[f()]" + END + "\nDone.",
        "Let me look.\n\nDone.",
        [("f", {})],
    ),
    Case(
        "text_after_bare_list",
        "[f(a=1)]\nThat is all.",
        "\nThat is all.",
        [("f", {"a": 1})],
    ),
    Case(
        "leading_whitespace_and_newlines_inside",
        "\n  [\n  a(x=1),\n  b(y='z')\n]\n",
        None,
        [("a", {"x": 1}), ("b", {"y": "z"})],
    ),
    Case(
        "nested_unicode",
        '[f(q={"city": "Montréal", "tags": ["東京", "🙂"]}, pair=(1, 2))]',
        None,
        [("f", {"q": {"city": "Montréal", "tags": ["東京", "🙂"]}, "pair": [1, 2]})],
    ),
    Case(
        "python_literals",
        '[f(t=True, n=None, neg=-3, e=1.5e3, s=\'it\\\'s\', d="say \\"hi\\"", '
        "tq='''a ] ) ' b''', br=\"[(\")]",
        None,
        [
            (
                "f",
                {
                    "t": True,
                    "n": None,
                    "neg": -3,
                    "e": 1500.0,
                    "s": "it's",
                    "d": 'say "hi"',
                    "tq": "a ] ) ' b",
                    "br": "[(",
                },
            )
        ],
    ),
    Case("empty_args", "[ping()]", None, [("ping", {})]),
    Case(
        "positional_argument_is_content",
        '[f("Paris", unit="c")]',
        '[f("Paris", unit="c")]',
    ),
    Case(
        "non_literal_value_is_content",
        '[f(path=__import__("os").getcwd())]',
        '[f(path=__import__("os").getcwd())]',
    ),
    Case("name_value_is_content", "[f(a=x)]", "[f(a=x)]"),
    Case("set_value_is_content", "[f(a={1, 2})]", "[f(a={1, 2})]"),
    Case("non_string_key_is_content", "[f(a={1: 'x'})]", "[f(a={1: 'x'})]"),
    Case("keyword_splat_is_content", '[f(**{"a": 1})]', '[f(**{"a": 1})]'),
    Case("mismatched_brackets_is_content", "[f(a=1] and on", "[f(a=1] and on"),
    Case("empty_list_is_content", "[]", "[]"),
    Case("citation_is_content", "[1] Smith et al., 2020", "[1] Smith et al., 2020"),
    Case(
        "markdown_link_is_content",
        "[docs](https://example.com) say so",
        "[docs](https://example.com) say so",
    ),
    Case(
        "call_list_inside_prose_is_content",
        "You could write [f(a=1)] here.",
        "You could write [f(a=1)] here.",
    ),
    Case(
        "cut_off_incomplete_is_content",
        'Sure <|python_start|>[f(a="b',
        'Sure <|python_start|>[f(a="b',
    ),
    Case("cut_off_bare_incomplete_is_content", "[f(a=1), g(", "[f(a=1), g("),
    Case(
        "cut_off_before_end_marker_recovered",
        START + '[f(a="b")]<|python_',
        None,
        [("f", {"a": "b"})],
    ),
    Case(
        "plain_text", "Just text with a < sign and <|python", "Just text with a < sign and <|python"
    ),
    Case(
        "undeclared_name_still_returned",
        "[other(k=True)]",
        None,
        [("other", {"k": True})],
        tools={"declared": {}},
    ),
]


globals().update(family_tests(FAMILY, CASES, special_tokens=True))


def test_prose_streams_at_once() -> None:
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    assert parser.feed("Hello [") == [Content("Hello [")]
    assert parser.feed("f(a=1)]") == [Content("f(a=1)]")]


def test_leading_bracket_is_held_until_known() -> None:
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    assert parser.feed("[f(a=") == []
    assert parser.feed("1)") == []
    pieces = parser.feed("] ok")
    assert [type(p) for p in pieces] == [ToolCall, Content]


def test_leading_bracket_of_prose_is_released_without_waiting() -> None:
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    assert parser.feed("[") == []
    assert parser.feed("Note") == []  # could still be `Note(`
    assert parser.feed(": x") == [Content("[Note: x")]


def test_values_are_never_evaluated(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    ran: list[str] = []
    monkeypatch.setattr(builtins, "rotor_canary", lambda: ran.append("x") or 1, raising=False)
    output = "[f(a=rotor_canary())]"
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    pieces = parser.feed(output) + parser.finish()
    assert pieces == [Content(output)]
    assert ran == []


def feed_in_pieces(output: str, size: int) -> list[Piece]:
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    pieces: list[Piece] = []
    for i in range(0, len(output), size):
        pieces += parser.feed(output[i : i + size])
    return pieces + parser.finish()


def test_a_long_argument_in_small_pieces_is_one_call() -> None:
    value = "x" * 64_000
    output = START + '[f(a="' + value + '", b=' + "'''it's \"q\"'''" + ")]" + END
    pieces = feed_in_pieces(output, 4)
    assert [type(p) for p in pieces] == [ToolCall]
    assert json.loads(pieces[0].arguments) == {"a": value, "b": 'it\'s "q"'}


def test_the_list_is_read_once_however_it_arrives(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each token only extends the scan: the characters the end finder looks
    at add up to about the list's length, not to its length once per token."""
    reads = 0

    class Counted(str):
        def __getitem__(self, key: int | slice) -> str:  # type: ignore[override]
            nonlocal reads
            reads += 1
            return str.__getitem__(self, key)

    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    section_end = parser.section_end
    monkeypatch.setattr(
        parser, "section_end", lambda body, final: section_end(Counted(body), final)
    )
    value = "x" * 4000
    output = '[f(a="' + value + "\", b=[1, {'k': (2,)}], c='''t\\\\''')] ok"
    pieces: list[Piece] = []
    for i in range(0, len(output), 4):
        pieces += parser.feed(output[i : i + 4])
    pieces += parser.finish()
    calls = [json.loads(p.arguments) for p in pieces if isinstance(p, ToolCall)]
    assert calls == [{"a": value, "b": [1, {"k": [2]}], "c": "t\\"}]
    assert "".join(p.text for p in pieces if isinstance(p, Content)) == " ok"
    assert reads < 2 * len(output)


_python_text = st.text(alphabet="ab '\"\\\n[](){}#,", max_size=12)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), a=_python_text, b=_python_text, quote=st.sampled_from(["'''", '"""']))
def test_strings_cut_anywhere_give_the_same_calls(
    data: st.DataObject, a: str, b: str, quote: str
) -> None:
    """Quotes of either kind, triple quotes and escapes, cut at any point: the
    scan resumes inside them and finds the list's end all the same."""
    # `b` goes raw between the triple quotes: no quote of that kind, no escape.
    assume(quote[0] not in b and "\\" not in b)
    output = f"[f(a={a!r}, b={quote}{b}{quote}), f(c=[{a!r}])] after"
    parser = tool_parser(FAMILY)(Tools({"f": {}}))
    pieces: list[Piece] = []
    for chunk in data.draw(splits(output)):
        pieces += parser.feed(chunk)
    pieces += parser.finish()
    calls = [json.loads(p.arguments) for p in pieces if isinstance(p, ToolCall)]
    assert calls == [{"a": a, "b": b}, {"c": [a]}]
    assert "".join(p.text for p in pieces if isinstance(p, Content)) == " after"
