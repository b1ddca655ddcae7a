"""The text helpers every parser (and decode's stop strings) relies on."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.pipeline.parse.base import earliest, partial_marker_len, skip_space, trim_partial

_alphabet = "ab<|>"


def reference_partial_len(text: str, markers: tuple[str, ...]) -> int:
    """The obvious definition: every proper prefix of every marker, longest match."""
    return max((k for m in markers for k in range(1, len(m)) if text.endswith(m[:k])), default=0)


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(alphabet=_alphabet, max_size=14),
    markers=st.lists(st.text(alphabet=_alphabet, max_size=7), max_size=4),
)
def test_partial_marker_len_is_the_longest_suffix_that_is_a_proper_prefix(
    text: str, markers: list[str]
) -> None:
    assert partial_marker_len(text, tuple(markers)) == reference_partial_len(text, tuple(markers))


def test_partial_marker_len_examples() -> None:
    assert partial_marker_len("see <tool_", ("<tool_call>",)) == 6
    assert partial_marker_len("<tool_call>", ("<tool_call>",)) == 0  # whole: not a proper prefix
    assert partial_marker_len("aaa", ("aaab",)) == 3
    assert partial_marker_len("x<", ("<|end|>", "<")) == 1
    assert partial_marker_len("anything", ("", "a")) == 0


def test_trim_partial_drops_a_cut_marker_only() -> None:
    assert trim_partial('{"a": 1}</tool_', ("</tool_call>",)) == '{"a": 1}'
    assert trim_partial('{"a": 1}', ("</tool_call>",)) == '{"a": 1}'
    assert trim_partial("x<|tool_call_sec", ("<|a|>", "<|tool_call_section_end|>")) == "x"


def test_earliest_finds_the_first_marker_and_breaks_ties_by_order() -> None:
    assert earliest("ab<|end|>cd<|call|>", ("<|call|>", "<|end|>")) == (2, "<|end|>")
    assert earliest("ab<|end|>cd<|call|>", ("<|call|>", "<|end|>"), 3) == (11, "<|call|>")
    assert earliest("abc", ("x",)) == (-1, None)
    assert earliest("<ab", ("<a", "<ab")) == (0, "<a")


def test_skip_space() -> None:
    assert skip_space("  \t\n x") == 5
    assert skip_space("x  y", 1) == 3
    assert skip_space("xy", 1) == 1
    assert skip_space("   ") == 3
    assert skip_space("\u3000\xa0x") == 2  # str.isspace, as before
