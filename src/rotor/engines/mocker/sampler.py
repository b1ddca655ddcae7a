"""Seeded stand-ins for a model's sampler and its logprobs.

Output is random but reproducible: the same seed and choice index give the
same tokens, whatever else the request asks for (logprobs come from their own
generator so asking for them never changes the tokens). The prompt's logprobs
(`prompt_logprobs`) are the same for every request and engine: each token's
is a function of the tokens before it and of the token itself.
"""

from __future__ import annotations

import math
import random

from rotor.model.tokenizer import Tokenizer
from rotor.protocol.engine import EngineOutput, PromptLogprob, StopParams, TokenLogprob

BAN = -100.0  # a bias this low bans a token (OpenAI: "should result in a ban")
FORCE = 100.0  # this high makes it (with any others as high) the only choice


def readable_vocab(tokenizer: Tokenizer) -> list[int]:
    """The ids the random sampler draws from: ordinary tokens that decode on
    their own to whole printable text (no U+FFFD from part of a multi-byte
    character, no control characters), so demos, text mode and clients that
    re-tokenize see words. Falls back to every ordinary token if none is."""
    added = tokenizer.raw.get_added_tokens_decoder()
    ordinary = [i for i in range(tokenizer.vocab_size) if i not in added]
    readable = [i for i in ordinary if _printable(tokenizer.decode([i]))]
    return readable or ordinary


def _printable(text: str) -> bool:
    return bool(text.strip()) and "\ufffd" not in text and text.isprintable()


def biased(vocab: list[int], bias: dict[int, float] | None) -> list[int]:
    """`vocab` under a logit_bias as the mocker honours it: tokens at -100 are
    never drawn; tokens at +100, when any, are the only ones drawn. Biases in
    between do not change a simulated (uniform) draw."""
    if not bias:
        return vocab
    forced = [t for t, b in bias.items() if b >= FORCE]
    if forced:
        return forced
    banned = {t for t, b in bias.items() if b <= BAN}
    kept = [t for t in vocab if t not in banned]
    return kept or vocab


class RandomSource:
    """Ordinary tokens until a seeded coin says EOS, or max_tokens says length.

    A token is `rng.choice(vocab)`, drawn as `Random.choice` draws it (bits
    until one index fits), without its two Python calls per token."""

    closed = False

    __slots__ = (
        "rng",
        "vocab",
        "eos_id",
        "stop_ids",
        "max_tokens",
        "min_tokens",
        "eos_probability",
        "_bits",
        "_size",
    )

    def __init__(
        self,
        rng: random.Random,
        vocab: list[int],
        eos_id: int | None,
        stop: StopParams,
        eos_probability: float,
    ) -> None:
        if not vocab:
            raise IndexError("Cannot choose from an empty sequence")
        self.rng = rng
        self.vocab = vocab
        self.eos_id = None if stop.ignore_eos else eos_id
        self.stop_ids = set(stop.stop_token_ids) | set(stop.visible_stop_token_ids)
        self.max_tokens = stop.max_tokens
        self.min_tokens = stop.min_tokens
        self.eos_probability = eos_probability
        self._size = len(vocab)
        self._bits = self._size.bit_length()

    def _token(self) -> int:
        """`self.rng.choice(self.vocab)`, the same draw."""
        bits, size = self._bits, self._size
        getrandbits = self.rng.getrandbits
        r = getrandbits(bits)
        while r >= size:
            r = getrandbits(bits)
        return self.vocab[r]

    def next(self, num_generated: int, limit: int) -> EngineOutput:
        may_stop = num_generated >= self.min_tokens
        if may_stop and self.eos_id is not None and self.rng.random() < self.eos_probability:
            return EngineOutput(token_ids=[self.eos_id], finish="eos", matched=self.eos_id)
        token = self._token()
        if may_stop and token in self.stop_ids:
            return EngineOutput(token_ids=[token], finish="stop", matched=token)
        if num_generated + 1 >= self.max_tokens:
            return EngineOutput(token_ids=[token], finish="length")
        return EngineOutput(0, [token])

    def skip(self, count: int) -> None:
        """Draw what `count` tokens already given took, so a seeded answer
        resumed here (migrated, or decoded after a remote prefill) goes on as
        it would have; exact when min_tokens was 0 or still is above 0 here."""
        may_stop = self.min_tokens == 0
        for _ in range(count):
            if may_stop and self.eos_id is not None:
                self.rng.random()
            self._token()


class LogprobMaker:
    """Well-formed logprobs: the sampled token is the most likely one and the
    alternatives share what probability is left, in descending order."""

    def __init__(self, rng: random.Random, vocab: list[int], top_logprobs: int) -> None:
        self.rng = rng
        self.vocab = vocab
        self.top_logprobs = top_logprobs

    def make(self, token_id: int) -> TokenLogprob:
        p = self.rng.uniform(0.4, 0.95)
        logprob = math.log(p)
        top: list[tuple[int, float]] = []
        if self.top_logprobs > 0:
            top.append((token_id, logprob))
            others = self.rng.sample(self.vocab, min(self.top_logprobs, len(self.vocab)))
            rest = 1.0 - p
            for other in others:
                if len(top) == self.top_logprobs:
                    break
                if other == token_id:
                    continue
                rest /= 2
                top.append((other, math.log(rest)))
        return TokenLogprob(token_id, logprob, top)

    def skip(self, count: int) -> None:
        """Draw what `count` tokens' logprobs took (what a token is does not
        change the draws), as `RandomSource.skip`."""
        for _ in range(count):
            self.make(-1)


# -- the prompt's logprobs -------------------------------------------------------

_MASK = (1 << 64) - 1
_PROMPT_SEED = 0x726F746F72  # a prefix's hash starts here
MAX_RANK = 32  # a prompt token's rank is at most this


def _mix(x: int) -> int:
    """SplitMix64's step: a well-mixed 64-bit value from any integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def prompt_logprobs(vocab: list[int], ids: list[int], top: int) -> list[PromptLogprob]:
    """Each prompt token's logprob after the first, given the tokens before
    it, with its rank and `top` alternatives: the same for any request that
    has that prefix (asking for fewer alternatives gives the first of the
    same ones). A prefix's likeliest token has p in [0.4, 0.95), and each
    next rank half the one before; the token's own rank is 1 with
    probability 1/2, 2 with 1/4, ... (at most MAX_RANK); the tokens at the
    other ranks are drawn from `vocab`."""
    out: list[PromptLogprob] = []
    prefix = _mix(_PROMPT_SEED)  # the hash of the tokens so far
    for i, token in enumerate(ids):
        if i:
            out.append(_scored(prefix, token, vocab, top))
        prefix = _mix(prefix ^ token)
    return out


def _scored(prefix: int, token: int, vocab: list[int], top: int) -> PromptLogprob:
    """`token`'s entry after the prefix whose hash is `prefix`."""
    p1 = 0.4 + 0.55 * (_mix(prefix ^ 1) >> 11) / float(1 << 53)

    def logprob(rank: int) -> float:
        return math.log(p1) if rank == 1 else math.log((1.0 - p1) / 2.0 ** (rank - 1))

    bits, rank = _mix(prefix ^ _mix(token)), 1
    while bits & 1 and rank < MAX_RANK:
        rank, bits = rank + 1, bits >> 1
    alternatives: list[tuple[int, float]] = []
    taken = {token}
    draw = 0
    while len(alternatives) < top:
        k = len(alternatives) + 1
        if k == rank:
            alternatives.append((token, logprob(k)))
            continue
        draw += 1
        if draw > 8 * top + 8 or not vocab:  # (a vocabulary too small for `top`)
            break
        other = vocab[_mix(prefix ^ (draw << 40) ^ 0xA17) % len(vocab)]
        if other not in taken:
            taken.add(other)
            alternatives.append((other, logprob(k)))
    return PromptLogprob(token, logprob(rank), rank, alternatives)
