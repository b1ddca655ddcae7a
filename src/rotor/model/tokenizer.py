"""A thin wrapper over a Hugging Face `tokenizers.Tokenizer`.

It exists so the rest of rotor depends on four verbs (encode, decode,
decode_stream, token_to_id) and not on the Rust binding's spelling.
"""

from __future__ import annotations

from pathlib import Path

import tokenizers
from tokenizers.decoders import DecodeStream


class IncrementalDecoder:
    """Per-choice incremental detokenizer: never returns half a UTF-8 character."""

    __slots__ = ("_stream", "_tok")

    def __init__(self, tok: tokenizers.Tokenizer, skip_special_tokens: bool) -> None:
        self._tok = tok
        self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)

    def step(self, token_id: int) -> str:
        """Text completed by this token ('' while a character is still incomplete)."""
        return self._stream.step(self._tok, token_id) or ""


class Tokenizer:
    def __init__(self, tok: tokenizers.Tokenizer) -> None:
        self.raw = tok
        self.special_ids: frozenset[int] = frozenset(
            i for i, t in tok.get_added_tokens_decoder().items() if t.special
        )

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        return cls(tokenizers.Tokenizer.from_file(str(path)))

    @property
    def vocab_size(self) -> int:
        return self.raw.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`; special tokens written literally become their ids."""
        return self.raw.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.raw.decode(ids, skip_special_tokens=skip_special_tokens)

    def decoder(self, skip_special_tokens: bool) -> IncrementalDecoder:
        return IncrementalDecoder(self.raw, skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.raw.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.raw.id_to_token(token_id)
