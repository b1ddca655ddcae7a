"""Seeded stand-ins for a model's sampler and its logprobs.

Output is random but reproducible: the same seed and choice index give the
same tokens, whatever else the request asks for (logprobs come from their own
generator so asking for them never changes the tokens).
"""

from __future__ import annotations

import math
import random

from rotor.protocol.engine import EngineOutput, StopParams, TokenLogprob


class RandomSource:
    """Ordinary tokens until a seeded coin says EOS, or max_tokens says length."""

    closed = False

    def __init__(
        self,
        rng: random.Random,
        vocab: list[int],
        eos_id: int | None,
        stop: StopParams,
        eos_probability: float,
    ) -> None:
        self.rng = rng
        self.vocab = vocab
        self.eos_id = None if stop.ignore_eos else eos_id
        self.stop_ids = set(stop.stop_token_ids) | set(stop.visible_stop_token_ids)
        self.max_tokens = stop.max_tokens
        self.min_tokens = stop.min_tokens
        self.eos_probability = eos_probability

    def next(self, num_generated: int, limit: int) -> EngineOutput:
        may_stop = num_generated >= self.min_tokens
        if may_stop and self.eos_id is not None and self.rng.random() < self.eos_probability:
            return EngineOutput(token_ids=[self.eos_id], finish="eos", matched=self.eos_id)
        token = self.rng.choice(self.vocab)
        if may_stop and token in self.stop_ids:
            return EngineOutput(token_ids=[token], finish="stop", matched=token)
        if num_generated + 1 >= self.max_tokens:
            return EngineOutput(token_ids=[token], finish="length")
        return EngineOutput(token_ids=[token])


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
