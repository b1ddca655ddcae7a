"""pipeline/score.py: a score or rerank request's sides (vLLM's spellings,
1:1, 1:N, N:N), each pair tokenized as the model's tokenizer joins two texts
with where its second text starts, an embedding model's texts, the 400s
naming the field, and the ranking (best first, ties in order, top_n)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from rotor.model.builtin import builtin_test_model
from rotor.model.loader import load_model
from rotor.pipeline.errors import RequestError
from rotor.pipeline.score import (
    BiInputs,
    CrossInputs,
    Sides,
    cosine,
    prepare_scores,
    ranked,
    rerank_sides,
    score_sides,
)
from rotor.pipeline.served import ServedModel
from rotor.protocol.scores import MAX_TEXTS, RerankRequest, ScorePair, ScoreRequest

from support.cross_encoder import reranker_dir


def served(card_caps: dict, path: Path | None = None, context: int | None = None) -> ServedModel:
    if path is not None:
        card, tok = load_model(path)
    else:
        card, tok = builtin_test_model("m")
    for k, v in card_caps.items():
        setattr(card.capabilities, k, v)
    if context is not None:
        card.context_length = context
    return ServedModel(card, tok)


CROSS = {"scores_pairs": True, "generates": False}
EMBED = {"embedding_dim": 8, "generates": False}


@pytest.mark.parametrize(
    ("first", "second"),
    [("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2")],
)
def test_every_spelling_names_the_two_sides(first: str, second: str) -> None:
    sides = score_sides(ScoreRequest.model_validate({first: "q", second: ["a", "b"]}))
    assert sides == Sides(["q"], ["a", "b"], first, second)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"queries": ["a", "b"], "documents": ["x", "y", "z"]}, "queries", "as many as"),
        ({"queries": "q", "documents": "d", "text_2": "x"}, "text_2", "once"),
        ({"text_1": "q", "documents": "d"}, "text_1", "once"),
        ({}, "queries", "two sides"),
    ],
)
def test_sides_that_do_not_pair_up_are_400s_naming_a_field(
    body: dict, param: str, words: str
) -> None:
    with pytest.raises(RequestError) as caught:
        score_sides(ScoreRequest.model_validate(body))
    assert caught.value.param == param and words in str(caught.value)


@pytest.mark.parametrize(
    "body",
    [
        {"queries": "q", "documents": []},
        {"queries": [], "documents": "d"},
        {"queries": "q", "documents": ["d"] * (MAX_TEXTS + 1)},
        {"queries": "q", "documents": [1, 2]},
        {"queries": "q", "documents": "d", "top_n": 3},
    ],
)
def test_a_malformed_score_request_fails_validation(body: dict) -> None:
    with pytest.raises(ValidationError):
        ScoreRequest.model_validate(body)


def test_a_rerank_request_and_its_defaults() -> None:
    req = RerankRequest.model_validate({"query": "q", "documents": "d"})
    assert (req.top_n, req.return_documents) == (0, True)
    assert rerank_sides(req) == Sides(["q"], ["d"], "query", "documents")
    for bad in ({"query": "q", "documents": []}, {"query": "q", "documents": ["d"], "top_n": -1}):
        with pytest.raises(ValidationError):
            RerankRequest.model_validate(bad)


def test_a_cross_encoders_pairs_carry_the_bert_template_and_type_start(tmp_path: Path) -> None:
    model = served(CROSS, reranker_dir(tmp_path))
    tok = model.tokenizer
    assert tok is not None and model.card.token_type_ids
    inputs = prepare_scores(model, "/v1/score", Sides(["q one"], ["doc a", "doc b"], "q", "d"))
    assert isinstance(inputs, CrossInputs)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    for pair, doc in zip(inputs.pairs, ["doc a", "doc b"], strict=True):
        query_ids, doc_ids = tok.encode("q one"), tok.encode(doc)
        assert pair.token_ids == [cls, *query_ids, sep, *doc_ids, sep]
        assert pair.type_start == len(query_ids) + 2
    assert inputs.prompt_tokens == sum(len(p.token_ids) for p in inputs.pairs)


def test_without_token_types_a_pair_has_no_type_start() -> None:
    model = served(CROSS)  # the built-in tokenizer: no pair template, no token types
    inputs = prepare_scores(model, "/v1/score", Sides(["a", "b"], ["x", "y"], "q", "d"))
    assert isinstance(inputs, CrossInputs)
    tok = model.tokenizer
    assert tok is not None
    assert inputs.pairs == [
        ScorePair(tok.encode("a") + tok.encode("x"), None),
        ScorePair(tok.encode("b") + tok.encode("y"), None),
    ]


def test_an_embedding_models_texts_each_once_and_their_pairs() -> None:
    model = served(EMBED)
    one = prepare_scores(model, "/v1/score", Sides(["q"], ["a", "b", "c"], "q", "d"))
    assert isinstance(one, BiInputs) and len(one.token_ids) == 4
    assert one.pairs() == [(0, 1), (0, 2), (0, 3)]
    many = prepare_scores(model, "/v1/score", Sides(["p", "q"], ["a", "b"], "q", "d"))
    assert isinstance(many, BiInputs) and many.pairs() == [(0, 2), (1, 3)]
    with pytest.raises(RequestError) as caught:
        prepare_scores(model, "/v1/score", Sides(["q"], ["a", ""], "text_1", "text_2"))
    assert caught.value.param == "text_2" and "text_2[1]" in str(caught.value)


def test_a_generating_model_cannot_score_and_the_route_is_named() -> None:
    with pytest.raises(RequestError) as caught:
        prepare_scores(served({}), "/v1/rerank", Sides(["q"], ["a"], "query", "documents"))
    assert caught.value.param == "model" and "/v1/rerank" in str(caught.value)


def test_a_pair_past_the_context_is_named_by_its_index() -> None:
    model = served(CROSS, context=8)
    with pytest.raises(RequestError) as caught:
        prepare_scores(model, "/v1/rerank", Sides(["q"], ["a", "b " * 20], "query", "documents"))
    assert caught.value.param == "documents" and "documents[1]" in str(caught.value)


def test_cosine_and_ranking() -> None:
    assert cosine([1.0, 0.0], [0.0, 2.0]) == 0.0
    assert cosine([1.0, 1.0], [2.0, 2.0]) == pytest.approx(1.0)
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0
    scores = [0.2, 0.9, 0.2, 0.5]
    assert ranked(scores, 0) == [1, 3, 0, 2]  # ties keep their order
    assert ranked(scores, 2) == [1, 3]
    assert ranked(scores, 10) == [1, 3, 0, 2]
