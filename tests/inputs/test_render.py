"""The Renderer and the choice of Style, in process: what a piece sequence
becomes, whatever way its text was split into pieces."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rotor.inputs.render import Renderer, tool_call_line
from rotor.inputs.style import ANSI, PLAIN, TERMINAL, Style, choose, reasoning_only
from rotor.pipeline.parse.base import Content, Piece, Reasoning, ToolCall

SGR = re.compile(r"\x1b\[[0-9;]*m")


def render(pieces: list[Piece], style: Style, finish: str | None = "stop") -> str:
    out = io.StringIO()
    renderer = Renderer(out, style=style)
    for piece in pieces:
        renderer.piece(piece)
    renderer.finish(finish)
    return out.getvalue()


texts = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x1b"), min_size=1
)
runs = st.lists(
    st.one_of(
        st.builds(Content, texts),
        st.builds(Reasoning, texts),
        st.builds(ToolCall, st.sampled_from(["f", "get_weather"]), st.just('{"a": 1}')),
    ),
    max_size=8,
)


def split(pieces: list[Piece], cuts: st.DataObject) -> list[Piece]:
    """The same message with each text piece cut into smaller pieces."""
    out: list[Piece] = []
    for piece in pieces:
        if type(piece) is ToolCall:
            out.append(piece)
            continue
        text = piece.text
        points = sorted(cuts.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=4)))
        bounds = [0, *(p for p in points if p < len(text)), len(text)]
        out += [
            type(piece)(text[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a
        ]
    return out


@given(runs, st.data(), st.sampled_from([None, "stop", "length", "tool_calls"]))
def test_output_does_not_depend_on_how_the_text_was_split(
    pieces: list[Piece], data: st.DataObject, finish: str | None
) -> None:
    finer = split(pieces, data)
    for style in (PLAIN, TERMINAL, ANSI):
        assert render(finer, style, finish) == render(pieces, style, finish)


@given(runs, st.sampled_from([None, "stop", "length"]))
def test_colour_is_only_codes_over_the_terminal_text(
    pieces: list[Piece], finish: str | None
) -> None:
    coloured = render(pieces, ANSI, finish)
    assert SGR.sub("", coloured) == render(pieces, TERMINAL, finish)
    assert "\x1b" not in render(pieces, PLAIN, finish)


@given(runs)
def test_plain_adds_only_line_breaks(pieces: list[Piece]) -> None:
    """No labels, notes or codes: every text as written, tool calls as their
    lines, and nothing more than the newlines that put them on lines."""
    shown = render(pieces, PLAIN, "length")
    written = "".join(tool_call_line(p) if type(p) is ToolCall else p.text for p in pieces)
    assert shown.replace("\n", "") == written.replace("\n", "")
    assert shown == "" or shown.endswith("\n")


def test_codes_go_around_runs_not_pieces() -> None:
    pieces: list[Piece] = [Reasoning("a"), Reasoning("b"), Content("c"), Content("d")]
    shown = render(pieces, ANSI)
    assert shown == (
        f"{ANSI.label}thinking:{ANSI.reset} {ANSI.reasoning}ab{ANSI.reset}\n"
        f"{ANSI.answer}cd{ANSI.reset}\n"
    )


def test_stdin_mode_dims_only_the_reasoning_stream() -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out, reasoning_out=err, style=reasoning_only(ANSI))
    for piece in (Reasoning("hm"), Content("yes"), ToolCall("f", "{}")):
        renderer.piece(piece)
    renderer.finish("length")
    assert out.getvalue() == "yes\n→ f({})\n"
    assert err.getvalue() == f"{ANSI.reasoning}hm{ANSI.reset}\n"
    assert reasoning_only(PLAIN) == PLAIN


@pytest.fixture
def tty() -> Iterator[io.TextIOWrapper]:
    """A real terminal device (the slave end of a pty)."""
    master, slave = os.openpty()
    stream = os.fdopen(slave, "w")
    yield stream
    stream.close()
    os.close(master)


@pytest.mark.parametrize(
    ("mode", "env", "expected"),
    [
        ("auto", {"TERM": "xterm"}, ANSI),
        ("auto", {"TERM": "xterm", "NO_COLOR": ""}, ANSI),  # empty counts as unset
        ("auto", {"TERM": "xterm", "NO_COLOR": "1"}, TERMINAL),
        ("auto", {"TERM": "dumb"}, TERMINAL),
        ("never", {"TERM": "xterm"}, TERMINAL),
        ("always", {"TERM": "dumb", "NO_COLOR": "1"}, ANSI),  # the flag wins
    ],
)
def test_choose_on_a_terminal(
    tty: io.TextIOWrapper, mode: str, env: dict[str, str], expected: Style
) -> None:
    assert choose(mode, tty, env) is expected


@pytest.mark.parametrize(
    ("mode", "expected"), [("auto", PLAIN), ("never", PLAIN), ("always", ANSI)]
)
def test_choose_off_a_terminal(mode: str, expected: Style) -> None:
    assert choose(mode, io.StringIO(), {"TERM": "xterm"}) is expected


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, always, never"):
        choose("sometimes", io.StringIO(), {})
