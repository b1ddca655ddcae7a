"""The byte-level BPE the decoder tests run on (`build_tokenizer`, special and
added tokens included), and ways to tokenize text over it that a plain
`encode` never picks: one token per byte, or any split the vocabulary allows."""

from __future__ import annotations

import functools

from rotor.model.builtin import build_tokenizer
from rotor.model.tokenizer import Tokenizer

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|return|>", "<|call|>", "<stop>")
ADDED = ("<tool_call>", "</tool_call>")


@functools.cache
def tokenizer() -> Tokenizer:
    return Tokenizer(build_tokenizer(SPECIAL, ADDED))


def tid(token: str) -> int:
    i = tokenizer().token_to_id(token)
    assert i is not None, token
    return i


@functools.cache
def byte_chars() -> dict[int, str]:
    """UTF-8 byte → the character that stands for it in the vocabulary (GPT-2's
    byte-level alphabet)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    bs += range(ord("®"), ord("ÿ") + 1)
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


@functools.cache
def byte_token_ids() -> dict[int, int]:
    """UTF-8 byte → the id of its single-byte token."""
    return {b: tid(c) for b, c in byte_chars().items()}


def byte_ids(text: str) -> list[int]:
    """One token per UTF-8 byte: every multi-byte character crosses token boundaries."""
    table = byte_token_ids()
    return [table[b] for b in text.encode()]


@functools.cache
def bpe_vocab() -> tuple[dict[bytes, int], int]:
    """Bytes of every BPE token (added tokens excluded) → its id; the longest length."""
    byte_of = {c: b for b, c in byte_chars().items()}
    vocab: dict[bytes, int] = {}
    for token, i in tokenizer().raw.get_vocab(with_added_tokens=False).items():
        if all(ch in byte_of for ch in token):
            vocab[bytes(byte_of[ch] for ch in token)] = i
    assert len([k for k in vocab if len(k) == 1]) == 256
    return vocab, max(len(k) for k in vocab)
