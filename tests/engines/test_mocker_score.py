"""The mocker as a cross-encoder (`--runner pooling --convert classify`):
scores in [0, 1) that depend on the pair's tokens and where its second text
starts alone; a mocker that is not one refuses, naming `model`."""

from __future__ import annotations

import pytest

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.engines.mocker.score import pair_score
from rotor.model.builtin import builtin_test_model
from rotor.protocol.engine import EngineError
from rotor.protocol.scores import ScorePair


def test_a_pairs_score_is_its_own() -> None:
    a = ScorePair([1, 2, 3, 4], 2)
    assert pair_score(a) == pair_score(ScorePair([1, 2, 3, 4], 2))
    assert 0 <= pair_score(a) < 1
    others = {pair_score(ScorePair([1, 2, 3, 4], 3)), pair_score(ScorePair([1, 2, 3, 5], 2))}
    others.add(pair_score(ScorePair([1, 2, 3, 4], None)))
    assert pair_score(a) not in others and len(others) == 3


@pytest.mark.asyncio
async def test_a_cross_encoder_mocker_scores_and_says_so_on_its_card() -> None:
    card, tok = builtin_test_model("m")
    engine = MockerEngine(card, tok, MockerConfig(scores_pairs=True, speedup_ratio=0))
    caps = engine.card.capabilities
    assert (caps.scores_pairs, caps.generates, caps.embedding_dim) == (True, False, 0)
    pairs = [ScorePair([5, 6, 7], 1), ScorePair([8, 9], None)]
    assert await engine.score(pairs) == [pair_score(p) for p in pairs]


@pytest.mark.asyncio
async def test_a_generating_mocker_refuses_to_score() -> None:
    card, tok = builtin_test_model("m")
    engine = MockerEngine(card, tok, MockerConfig(speedup_ratio=0))
    with pytest.raises(EngineError) as caught:
        await engine.score([ScorePair([1, 2], None)])
    assert caught.value.kind == "refused" and caught.value.param == "model"
