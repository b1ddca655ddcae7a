"""Incremental detokenization of byte-level BPE, in Python: what
`tokenizers.decoders.DecodeStream` returns, token for token, at a third of
its cost.

A byte-level tokenizer's decode is a function of bytes alone: each token
stands for fixed bytes (its characters mapped back through GPT-2's byte
alphabet, or, for a token with a character outside it, such as an added
token with a space, its own UTF-8), a skipped special token for none, and
the text is those bytes joined and decoded, a U+FFFD for each ill-formed
part (Rust's `from_utf8_lossy`, Python's "replace": both substitute maximal
subparts). DecodeStream's algorithm runs unchanged here over those bytes:
keep a window, decode it, release the text past the prefix once it does not
end in U+FFFD, then keep only what was just released as the next prefix.
In the usual state (the window decodes cleanly and the new token's bytes
are whole characters) that is one table look-up and one decode.

`ByteStream.table` says None for a tokenizer whose decoder is anything but
a plain ByteLevel one (SentencePiece's Metaspace, byte fallback, ...): those
keep DecodeStream. tests/model/test_byte_stream.py holds the two equal on
random token sequences, ill-formed bytes and special tokens included.
"""

from __future__ import annotations

import tokenizers
import tokenizers.decoders

from rotor.model.words import piece_bytes

_REPLACEMENT = "\ufffd"


def byte_table(tok: tokenizers.Tokenizer) -> list[bytes] | None:
    """Each id's bytes as the tokenizer's ByteLevel decoder sees them; None
    when its decoder is not ByteLevel."""
    if not isinstance(tok.decoder, tokenizers.decoders.ByteLevel):
        return None
    table: list[bytes] = []
    for i in range(tok.get_vocab_size(with_added_tokens=True)):
        token = tok.id_to_token(i)
        if token is None:
            table.append(b"")
            continue
        raw = piece_bytes(token)
        table.append(raw if raw is not None else token.encode())
    return table


def skipping(table: list[bytes], special_ids: frozenset[int]) -> list[bytes]:
    """`table` with the special tokens as b"": what skipping them decodes."""
    skipped = list(table)
    for i in special_ids:
        if i < len(skipped):
            skipped[i] = b""
    return skipped


class ByteStream:
    """One choice's incremental decoder over a byte table (`byte_table`)."""

    __slots__ = ("_table", "_window", "_prefix_bytes", "_prefix", "_clean")

    def __init__(self, table: list[bytes]) -> None:
        self._table = table
        self._window = b""  # the bytes of DecodeStream's window of ids
        self._prefix_bytes = 0  # how many of them its prefix covers
        self._prefix = ""  # the window's text already released
        # The prefix is the whole window and decodes cleanly: the next
        # token's text is its own bytes' decode.
        self._clean = True

    def step(self, token_id: int) -> str | None:
        """The text this token completes, or None (DecodeStream.step's answer)."""
        table = self._table
        data = table[token_id] if 0 <= token_id < len(table) else b""
        if self._clean:
            text = data.decode("utf-8", "replace")
            if text and text[-1] != _REPLACEMENT:
                self._window = data
                self._prefix_bytes = len(data)
                self._prefix = text
                return text
            if not data:
                return None
            self._clean = False
        return self._slow(data)

    def _slow(self, data: bytes) -> str | None:
        """DecodeStream.step's algorithm, literally, over bytes."""
        prefix = self._prefix
        window = self._window
        if not prefix and window:
            first = window.decode("utf-8", "replace")
            if first[-1] != _REPLACEMENT:
                prefix = self._prefix = first
                self._prefix_bytes = len(window)
        window += data
        text = window.decode("utf-8", "replace")
        if len(text) > len(prefix) and text[-1] != _REPLACEMENT:
            if not text.startswith(prefix):  # DecodeStream's InvalidPrefix
                raise ValueError("the decoded window no longer starts with its prefix")
            window = window[self._prefix_bytes :]
            self._window = window
            self._prefix_bytes = len(window)
            self._prefix = window.decode("utf-8", "replace")
            self._clean = True
            return text[len(prefix) :]
        self._window = window
        return None
