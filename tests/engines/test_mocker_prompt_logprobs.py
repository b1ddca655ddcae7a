"""The mocker's prompt logprobs: deterministic functions of each token's
prefix (whatever the request, choice, seed or engine), well formed (ranks
agree with the alternatives, best first), and carried once, on a request's
first output."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.engines.mocker.sampler import MAX_RANK, prompt_logprobs, readable_vocab
from rotor.protocol.engine import EngineError, OutputParams, PromptLogprob, SamplingParams

from support.mocker import TOK, MakeEngine, collect, request

VOCAB = readable_vocab(TOK)
IDS = TOK.encode("The quick brown fox jumps over the lazy dog, twice over.")


def check_well_formed(entry: PromptLogprob, top: int) -> None:
    assert 1 <= entry.rank <= MAX_RANK and entry.logprob < 0
    assert len(entry.top) == top
    values = [v for _, v in entry.top]
    assert values == sorted(values, reverse=True)  # best first
    assert len({t for t, _ in entry.top}) == top  # no token twice
    if entry.rank <= top:  # the token itself, at its rank, with its own logprob
        assert entry.top[entry.rank - 1] == (entry.token_id, entry.logprob)
    else:
        assert entry.token_id not in {t for t, _ in entry.top}
        assert not values or entry.logprob < values[-1]
    # a distribution: the likeliest tokens' probabilities sum to less than 1
    assert sum(math.exp(v) for v in values) < 1.0


@pytest.mark.parametrize("top", [0, 1, 5, 20])
def test_each_entry_is_well_formed(top: int) -> None:
    entries = prompt_logprobs(VOCAB, IDS, top)
    assert [e.token_id for e in entries] == IDS[1:]  # every token after the first
    for entry in entries:
        check_well_formed(entry, top)
    # ranks vary (a prompt is not all the likeliest tokens), and rank 1 is common
    ranks = [e.rank for e in entries]
    assert ranks.count(1) > 0 and max(ranks) > 1


def test_fewer_alternatives_are_the_first_of_the_same_ones() -> None:
    many = prompt_logprobs(VOCAB, IDS, 20)
    for top in (0, 1, 3):
        few = prompt_logprobs(VOCAB, IDS, top)
        assert [(e.token_id, e.logprob, e.rank) for e in few] == [
            (e.token_id, e.logprob, e.rank) for e in many
        ]
        assert [e.top for e in few] == [e.top[:top] for e in many]


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.sampled_from(VOCAB[:64]), min_size=1, max_size=40),
    tail=st.lists(st.sampled_from(VOCAB[:64]), max_size=10),
    top=st.integers(0, 5),
)
def test_an_entry_depends_on_its_prefix_alone(ids: list[int], tail: list[int], top: int) -> None:
    """A prompt's entries are those of every prompt it starts: what comes
    after a token never changes its entry (so a prefix scores the same in
    any request that holds it)."""
    whole = prompt_logprobs(VOCAB, ids + tail, top)
    assert whole[: len(ids) - 1] == prompt_logprobs(VOCAB, ids, top)


def test_a_different_prefix_scores_differently() -> None:
    a = prompt_logprobs(VOCAB, IDS, 3)
    b = prompt_logprobs(VOCAB, [IDS[1], *IDS[1:]], 3)  # the same tokens after another first
    assert [e.token_id for e in a] == [e.token_id for e in b]
    assert all(x.logprob != y.logprob and x.top != y.top for x, y in zip(a, b, strict=True))


async def test_the_first_output_carries_them_once(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    asked = request(output=OutputParams(prompt_logprobs=2))
    outs = await collect(engine, asked)
    assert outs[0].prompt_logprobs == prompt_logprobs(VOCAB, asked.token_ids, 2)
    assert all(o.prompt_logprobs is None for o in outs[1:])
    # the same prompt, another request, another seed: the same entries
    again = request(output=OutputParams(prompt_logprobs=2), sampling=SamplingParams(seed=5))
    assert (await collect(engine, again))[0].prompt_logprobs == outs[0].prompt_logprobs
    # not asked: none
    assert all(o.prompt_logprobs is None for o in await collect(engine, request()))


async def test_a_request_of_n_choices_carries_them_once(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    asked = request(n=3, output=OutputParams(prompt_logprobs=0))
    outs = await collect(engine, asked)
    carried = [o for o in outs if o.prompt_logprobs is not None]
    assert len(carried) == 1 and carried[0] is outs[0]
    assert carried[0].prompt_logprobs == prompt_logprobs(VOCAB, asked.token_ids, 0)


async def test_a_scripted_answer_and_logprobs_leave_them_alone(make_engine: MakeEngine) -> None:
    engine = await make_engine()
    output = OutputParams(logprobs=True, top_logprobs=2, prompt_logprobs=1)
    scripted = request({"output": "Fine."}, output=output)
    outs = await collect(engine, scripted)
    assert outs[0].prompt_logprobs == prompt_logprobs(VOCAB, scripted.token_ids, 1)
    assert TOK.decode([t for o in outs for t in o.token_ids]).startswith("Fine.")
    assert all(o.logprobs is not None for o in outs)


@pytest.mark.parametrize("top", [-1, 21])
async def test_out_of_range_is_refused_naming_the_field(make_engine: MakeEngine, top: int) -> None:
    engine = await make_engine()
    with pytest.raises(EngineError) as e:
        await collect(engine, request(output=OutputParams(prompt_logprobs=top)))
    assert e.value.kind == "refused" and e.value.param == "prompt_logprobs"
