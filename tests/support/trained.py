"""Small BPE tokenizers trained here on a few lines, for the tokenizer tests
(any pre-tokenizer and normalizer, ChatML's two markers as special tokens),
and a proxy that records what a tokenizer was asked to encode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers


def trained_bpe(
    pre_tokenizer: Any,
    corpus: Sequence[str],
    normalizer: Any = None,
    vocab_size: int = 300,
    **model: Any,
) -> tokenizers.Tokenizer:
    """A byte-level-alphabet BPE over `corpus`; `model`: BPE options
    (dropout, ignore_merges)."""
    tok = tokenizers.Tokenizer(models.BPE(**model))
    tok.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer)
    return tok


class Counting:
    """A tokenizer with every text it was asked to encode written down."""

    def __init__(self, tok: tokenizers.Tokenizer) -> None:
        self.tok = tok
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tok, name)

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool) -> Any:
        self.asked.extend(texts)
        return self.tok.encode_batch_fast(texts, add_special_tokens=add_special_tokens)
