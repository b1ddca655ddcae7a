"""The long/short mix: its spec parses (shares filled in, bad items named),
classes come in their shares with lengths in their ranges, one seed one mix."""

from __future__ import annotations

import random
from collections import Counter
from itertools import islice

import pytest

from rotor.bench.mix import MixClass, mixed, parse_mix
from rotor.bench.workload import WorkloadSpec, conversations


def test_parse_fills_in_the_shares() -> None:
    assert parse_mix("long=8000:16000@0.3,short=100:1000") == (
        MixClass("long", 8000, 16000, 0.3),
        MixClass("short", 100, 1000, pytest.approx(0.7)),
    )
    a, b, c = parse_mix("a=10@0.5, b=1:2, c=3:4")
    assert (a.min_tokens, a.max_tokens) == (10, 10) and b.share == c.share == pytest.approx(0.25)
    x, y = parse_mix("x=1@3,y=2@1")  # all given: relative
    assert (x.share, y.share) == (0.75, 0.25)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("long", "not NAME=MIN:MAX"),
        ("long=8k", "not NAME=MIN:MAX"),
        ("long=10:5", "MIN ≤ MAX"),
        ("long=0:5", "MIN ≤ MAX"),
        ("a=1@0", "must be positive"),
        ("a=1@0.6,b=2@0.5,c=3", "nothing left"),
        ("a=1,a=2", "a class name twice"),
        ("", "no classes"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"--mix.*{message}"):
        parse_mix(spec)


def test_classes_come_in_their_shares_and_ranges() -> None:
    classes = parse_mix("long=8000:16000@0.3,short=100:1000")
    convs = list(islice(mixed(classes, 2.0, 64, 0, random.Random(3)), 3000))
    counts = Counter(c.tag for c in convs)
    assert 0.26 < counts["long"] / 3000 < 0.34
    for c in convs:
        n_words = len(c.turns[0].text.split())
        lo, hi = (4000, 8000) if c.tag == "long" else (50, 500)  # 2 tokens a word
        assert lo <= n_words <= hi and c.turns[0].max_tokens == 64
    assert [c.index for c in convs[:5]] == [0, 1, 2, 3, 4]


def test_conversations_of_a_mix() -> None:
    spec = WorkloadSpec(mix=parse_mix("a=10:20,b=30:40"), tokens_per_word=1.0, output_len=5)
    first = list(islice(conversations(spec, "1:0"), 50))
    assert first == list(islice(conversations(spec, "1:0"), 50))
    assert first != list(islice(conversations(spec, "1:1"), 50))
    assert {c.tag for c in first} == {"a", "b"}
    with pytest.raises(ValueError, match="tokens per word"):
        next(conversations(WorkloadSpec(mix=spec.mix), 0))
