"""A score or rerank request made ready for an engine, checked against the
model before any engine sees it (400s naming the field).

Two kinds of model score, as in vLLM:

- a cross-encoder (`capabilities.scores_pairs`) reads each (query, document)
  pair as one sequence: the pair tokenized as the model's tokenizer joins two
  texts (tokenizer.encode_pair), with where the document's tokens start
  when the tokenizer gives token types (`card.token_type_ids`); the engine
  gives one score per pair;
- an embedding model (`capabilities.embedding_dim`) embeds each text on its
  own, and a pair's score is the cosine of its two vectors (`cosine`).

A model that only generates cannot score: a 400 naming `model` and the route.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rotor.pipeline.bounds import check_prompt_size
from rotor.pipeline.errors import RequestError
from rotor.pipeline.served import ServedModel
from rotor.protocol.scores import SIDES, RerankRequest, ScorePair, ScoreRequest, as_list


@dataclass(frozen=True)
class Sides:
    """A request's two sides: their texts and the fields that named them."""

    first: list[str]
    second: list[str]
    first_field: str
    second_field: str


def score_sides(req: ScoreRequest) -> Sides:
    """The two sides a score request names in one of vLLM's spellings, 1:1,
    1:N or N:N; RequestError naming the field otherwise."""
    given = req.given()
    for a, b in SIDES:
        if a in given and b in given and len(given) == 2:
            first, second = as_list(getattr(req, a)), as_list(getattr(req, b))
            if len(first) not in (1, len(second)):
                raise RequestError(
                    f"{a} has {len(first)} texts and {b} {len(second)}: give one {a} text "
                    f"(scored against each of {b}) or as many as {b} (scored in pairs)",
                    a,
                )
            return Sides(first, second, a, b)
    spellings = ", ".join(f"{a} and {b}" for a, b in SIDES)
    if not given:
        raise RequestError(f"a score request needs two sides: one of {spellings}", "queries")
    raise RequestError(
        f"a score request names its two sides once, as one of {spellings}; it gave "
        f"{', '.join(given)}",
        given[-1],
    )


def rerank_sides(req: RerankRequest) -> Sides:
    return Sides([req.query], as_list(req.documents), "query", "documents")


@dataclass(frozen=True)
class CrossInputs:
    """A cross-encoder's pairs, one per text of the second side."""

    pairs: list[ScorePair]

    @property
    def prompt_tokens(self) -> int:
        return sum(len(p.token_ids) for p in self.pairs)


@dataclass(frozen=True)
class BiInputs:
    """An embedding model's texts: the first side's, then the second's,
    each embedded once (`pairs`: the two vectors each pair compares)."""

    token_ids: list[list[int]]
    first: int  # how many of token_ids are the first side's

    @property
    def prompt_tokens(self) -> int:
        return sum(len(ids) for ids in self.token_ids)

    def pairs(self) -> list[tuple[int, int]]:
        """Each pair's two indexes into the vectors, in the second side's order."""
        second = len(self.token_ids) - self.first
        return [(0 if self.first == 1 else i, self.first + i) for i in range(second)]


ScoreInputs = CrossInputs | BiInputs


def prepare_scores(model: ServedModel, route: str, sides: Sides) -> ScoreInputs:
    """The request's pairs (a cross-encoder) or texts (an embedding model)
    as token ids; RequestError for what the model cannot take."""
    card, tok = model.card, model.tokenizer
    caps = card.capabilities
    if not caps.scores_pairs and not caps.embedding_dim:
        raise RequestError(
            f"the model {card.name!r} cannot score: it is served for generation; {route} "
            "takes a cross-encoder or an embedding model",
            "model",
        )
    if tok is None:
        raise RequestError(f"the model {card.name!r} has no tokenizer to score with", "model")
    context = card.context_length
    if not caps.scores_pairs:
        return _bi_inputs(model, sides, context)
    first = sides.first * len(sides.second) if len(sides.first) == 1 else sides.first
    pairs: list[ScorePair] = []
    for i, (a, b) in enumerate(zip(first, sides.second, strict=True)):
        what = f"pair with {sides.second_field}[{i}]"
        check_prompt_size(model, what, sides.second_field, a, b)
        ids, types = tok.encode_pair(a, b)
        if len(ids) > context:
            raise RequestError(
                f"the {what} is {len(ids)} tokens, more than the model's context length of "
                f"{context} tokens",
                sides.second_field,
            )
        start = types.index(1) if card.token_type_ids and 1 in types else None
        pairs.append(ScorePair(ids, start))
    return CrossInputs(pairs)


def _bi_inputs(model: ServedModel, sides: Sides, context: int) -> BiInputs:
    tok = model.tokenizer
    assert tok is not None
    token_ids: list[list[int]] = []
    for name, texts in ((sides.first_field, sides.first), (sides.second_field, sides.second)):
        for i, text in enumerate(texts):
            check_prompt_size(model, f"{name}[{i}]", name, text)
            ids = tok.encode(text, add_special_tokens=True)
            if not ids:
                raise RequestError(f"{name}[{i}] is empty: it has no tokens to embed", name)
            if len(ids) > context:
                raise RequestError(
                    f"{name}[{i}] is {len(ids)} tokens, more than the model's context length "
                    f"of {context} tokens",
                    name,
                )
            token_ids.append(ids)
    return BiInputs(token_ids, len(sides.first))


def cosine(a: list[float], b: list[float]) -> float:
    """The cosine of two vectors' angle (0 when either is all zeros)."""
    norms = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    if norms == 0:
        return 0.0
    return math.fsum(x * y for x, y in zip(a, b, strict=True)) / norms


def ranked(scores: list[float], top_n: int) -> list[int]:
    """The indexes of `scores`, best first (ties keep their order), the first
    `top_n` of them (0: all)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return order[:top_n] if top_n else order
