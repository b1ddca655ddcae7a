"""Workloads: one seed, one sequence; lengths follow the asked distribution;
shared-prefix prompts really start with one of the prefixes; files load or fail
with the line named."""

from __future__ import annotations

import random
import statistics
from itertools import islice
from pathlib import Path

import pytest

from rotor.bench.workload import WORDS, WorkloadSpec, conversations, load_dataset, make_prefixes


def take(spec: WorkloadSpec, seed: int | str, n: int) -> list:
    return list(islice(conversations(spec, seed), n))


def test_same_seed_same_requests() -> None:
    spec = WorkloadSpec(input_len=30, input_len_std=5, output_len=20, output_len_std=4, turns=2)
    assert take(spec, 11, 20) == take(spec, 11, 20)
    assert take(spec, 11, 20) != take(spec, 12, 20)
    assert take(spec, "0:1", 5) == take(spec, "0:1", 5)


def test_fixed_lengths_are_exact() -> None:
    for conv in take(WorkloadSpec(input_len=17, output_len=9), 0, 30):
        (turn,) = conv.turns
        assert len(turn.text.split()) == 17
        assert turn.max_tokens == 9
        assert set(turn.text.split()) <= set(WORDS)


def test_lengths_follow_the_distribution() -> None:
    spec = WorkloadSpec(input_len=200, input_len_std=40, output_len=64, output_len_std=16)
    convs = take(spec, 5, 3000)
    ins = [len(c.turns[0].text.split()) for c in convs]
    outs = [c.turns[0].max_tokens for c in convs]
    assert statistics.fmean(ins) == pytest.approx(200, rel=0.03)
    assert statistics.pstdev(ins) == pytest.approx(40, rel=0.08)
    assert statistics.fmean(outs) == pytest.approx(64, rel=0.03)
    assert statistics.pstdev(outs) == pytest.approx(16, rel=0.08)
    assert min(ins) >= 1 and min(outs) >= 1


def test_shared_prefix_prompts_share_their_prefix() -> None:
    spec = WorkloadSpec(input_len=50, shared_prefix=(3, 40), output_len=8)
    convs = take(spec, 9, 60)
    prefixes = make_prefixes(random.Random(9), 3, 40)  # the generator draws them first
    used = set()
    for conv in convs:
        text = conv.turns[0].text
        head = " ".join(text.split()[:40])
        assert head in prefixes
        assert text.startswith(head + " ")
        assert len(text.split()) == 50  # the prefix is 40 of the 50 words
        used.add(head)
    assert used == set(prefixes)  # every prefix is drawn in 60 requests


def test_turns_grow_a_conversation() -> None:
    (conv,) = take(WorkloadSpec(input_len=5, output_len=3, turns=4), 1, 1)
    assert len(conv.turns) == 4 and conv.history == ()


def test_dataset_lines(tmp_path: Path) -> None:
    f = tmp_path / "reqs.jsonl"
    f.write_text(
        '{"prompt": "hello there", "max_tokens": 5}\n\n'
        '{"messages": [{"role": "system", "content": "be brief"}, '
        '{"role": "user", "content": "hi"}]}\n'
    )
    a, b = load_dataset(f, 7)
    assert a.turns[0].text == "hello there" and a.turns[0].max_tokens == 5 and a.history == ()
    assert b.turns[0].text == "hi" and b.turns[0].max_tokens == 7
    assert b.history == ({"role": "system", "content": "be brief"},)
    cycled = take(WorkloadSpec(dataset=f, output_len=7), 0, 5)
    assert [c.turns[0].text for c in cycled] == ["hello there", "hi"] * 2 + ["hello there"]
    assert [c.index for c in cycled] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "reqs.jsonl:2: not JSON"),
        ("[1]", "reqs.jsonl:2: expected an object"),
        ('{"text": "x"}', 'needs "prompt"'),
        ('{"prompt": "x", "max_tokens": 0}', "max_tokens must be a positive integer"),
        ('{"messages": [{"role": "assistant", "content": "x"}]}', "last message must be a user"),
    ],
)
def test_dataset_errors_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    f = tmp_path / "reqs.jsonl"
    f.write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(ValueError, match=message):
        load_dataset(f, 8)


def test_empty_dataset(tmp_path: Path) -> None:
    f = tmp_path / "reqs.jsonl"
    f.write_text("\n")
    with pytest.raises(ValueError, match="no requests"):
        load_dataset(f, 8)
