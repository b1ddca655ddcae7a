"""Small BPE tokenizers trained here on a few lines, for the tokenizer tests:
any pre-tokenizer and normalizer, ChatML's two markers as special tokens."""

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
