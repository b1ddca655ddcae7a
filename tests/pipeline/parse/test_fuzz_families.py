"""Malformed model output never crashes a parser, and never loses text.

Hypothesis builds outputs from each family's own markers, JSON-ish
punctuation and ordinary text, cut at random; every family must parse them
without raising. Where a family found no call, everything the model wrote
comes back (as content, or as reasoning for the families that frame it).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rotor.pipeline.parse.base import ParseError, Tools
from rotor.pipeline.parse.tools import TOOL_PARSERS, tool_parser

from support.parsing import FAMILY_MARKERS, fold, make_parser, parser_markers, splits

# Families that frame the whole turn (channels): their markers are structure,
# not text, so "nothing lost" is checked on the text between markers only.
FRAMED = {"harmony", "beam"}

COMMON = [
    '{"name": "f", "arguments": {"a": 1}}',
    "{",
    "}",
    "[",
    "]",
    '"',
    ":",
    ",",
    "\n",
    " ",
    "f(a=1)",
    "name",
    "hello",
    "é東🙂",
    "<",
    ">",
    "|",
    "functions.f",
    "to=",
    "=",
    ";",
]


def fragments(family: str) -> list[str]:
    """The family's markers (the shared table, and whatever its parser class
    declares), the constants its module spells markers with, and COMMON."""
    cls = tool_parser(family)
    markers = [*FAMILY_MARKERS.get(family, ()), *sorted(parser_markers(family))]
    module = __import__(cls.__module__, fromlist=["_"])
    for value in vars(module).values():
        if (
            isinstance(value, str)
            and 1 < len(value) < 40
            and value.strip() == value
            and ("<" in value or "[" in value or "｜" in value or "▷" in value)
        ):
            markers.append(value)
    return list(dict.fromkeys(markers + COMMON))


@pytest.mark.parametrize("family", sorted(TOOL_PARSERS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_garbage_never_crashes_and_nothing_is_lost(family: str, data: st.DataObject) -> None:
    parts = data.draw(st.lists(st.sampled_from(fragments(family)), max_size=14))
    text = "".join(parts)
    chunks = data.draw(splits(text))
    tools = Tools({"f": {"type": "object", "properties": {"a": {"type": "integer"}}}})
    parser = make_parser(family, tools)
    pieces = []
    for chunk in chunks:
        pieces.extend(parser.feed(chunk))
    pieces.extend(parser.finish())
    msg = fold(pieces)
    if msg.calls or family in FRAMED:
        return
    # No call: every character the model wrote is content, except whitespace
    # that only ever stood next to (failed) calls — none here, so all of it.
    assert (msg.content or "") + (msg.reasoning or "") == text


@pytest.mark.parametrize("family", sorted(FRAMED))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_strict_finish_raises_only_parse_errors(family: str, data: st.DataObject) -> None:
    parts = data.draw(st.lists(st.sampled_from(fragments(family)), max_size=14))
    parser = make_parser(family, Tools({"f": {}}))
    for chunk in data.draw(splits("".join(parts))):
        parser.feed(chunk)
    try:
        parser.finish(strict=True, eos_text="<|return|>")
    except ParseError:
        pass
