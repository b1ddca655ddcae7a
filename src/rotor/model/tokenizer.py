"""A thin wrapper over a Hugging Face `tokenizers.Tokenizer`.

It exists so the rest of rotor depends on four verbs (encode, decode,
decode_stream, token_to_id) and not on the Rust binding's spelling.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import tokenizers
from tokenizers.decoders import DecodeStream

from rotor.model.byte_stream import ByteStream, byte_table, skipping
from rotor.model.segments import SegmentCache
from rotor.model.words import piece_bytes

# rotor encodes one text per call, where the Rust thread pool only adds a hop
# (a fifth of a short prompt's time); off, a forked HTTP process also has no
# "parallelism has already been used" warning to print. A user's own setting wins.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class IncrementalDecoder:
    """Per-choice incremental detokenizer: never returns half a UTF-8 character.

    `drop`: special-token ids skipped while others are kept — skipping special
    tokens except those a parser must see (reasoning tags that are special
    tokens); the stream then decodes with special tokens and leaves these out.
    `table`: the tokenizer's bytes per id when it is byte-level BPE
    (`byte_stream.byte_table`, for the same skipping): then the stream is
    rotor's `ByteStream`, which gives DecodeStream's answers for less."""

    __slots__ = ("_step", "_tok", "_drop")

    def __init__(
        self,
        tok: tokenizers.Tokenizer,
        skip_special_tokens: bool,
        drop: frozenset[int] = frozenset(),
        table: list[bytes] | None = None,
    ) -> None:
        self._tok = tok
        self._drop = drop
        if table is not None:
            self._step = ByteStream(table).step
        else:
            stream = DecodeStream(skip_special_tokens=skip_special_tokens and not drop)
            self._step = functools.partial(stream.step, tok)

    def step(self, token_id: int) -> str:
        """Text completed by this token ('' while a character is still incomplete)."""
        if token_id in self._drop:
            return ""
        return self._step(token_id) or ""


class Tokenizer:
    def __init__(self, tok: tokenizers.Tokenizer) -> None:
        self.raw = tok
        self.special_ids: frozenset[int] = frozenset(
            i for i, t in tok.get_added_tokens_decoder().items() if t.special
        )
        self._special_in: dict[tuple[str, ...], frozenset[int]] = {}  # per set of markers
        # None: this tokenizer's pieces depend on each other (prompts encode whole)
        self._segments = SegmentCache.build(tok)
        # byte-level BPE: each id's bytes, for ByteStream (made here, not on a
        # request's path: some 0.4 s for a 150k vocabulary); the same with
        # special tokens as b"", for skipping them
        table = byte_table(tok)
        self._byte_tables: dict[bool, list[bytes] | None] = {
            False: table,
            True: skipping(table, self.special_ids) if table is not None else None,
        }

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        return cls(tokenizers.Tokenizer.from_file(str(path)))

    @property
    def vocab_size(self) -> int:
        return self.raw.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`; special tokens written literally become their ids.
        `encode_batch_fast` releases the GIL while it works (`encode` holds it,
        stalling every other thread, the event loop's too) and skips the
        character offsets nobody here reads: a third faster than `encode`."""
        return self.raw.encode_batch_fast([text], add_special_tokens=add_special_tokens)[0].ids

    def encode_pair(self, text: str, pair: str) -> tuple[list[int], list[int]]:
        """Token ids of two texts as one sequence, the way the tokenizer's
        post-processor joins a pair (BERT's `[CLS] A [SEP] B [SEP]`; a
        tokenizer without a pair template just concatenates), with special
        tokens; and each token's type id (1 for the pair's second text, where
        the template says so)."""
        enc = self.raw.encode_batch_fast([(text, pair)], add_special_tokens=True)[0]
        return enc.ids, enc.type_ids

    def encode_chat(self, text: str) -> list[int]:
        """Token ids of a rendered chat prompt, the same as `encode(text)`. A
        conversation comes back every turn with one message more: the text
        between its markers is tokenized once and remembered (SegmentCache)."""
        if self._segments is None:
            return self.encode(text)
        return self._segments.encode(text)

    @functools.cached_property
    def max_token_chars(self) -> int:
        """The longest token's text, in characters (at least 1): no token covers
        more of a prompt than this."""
        vocab = self.raw.get_vocab(with_added_tokens=True)
        return max((len(t) for t in vocab), default=1) or 1

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.raw.decode(ids, skip_special_tokens=skip_special_tokens)

    def decoder(
        self, skip_special_tokens: bool, keep: frozenset[int] = frozenset()
    ) -> IncrementalDecoder:
        """`keep`: special-token ids decoded even when skipping special tokens."""
        if skip_special_tokens and keep:
            drop = self.special_ids - keep
            # the stream skips nothing itself while it drops some (IncrementalDecoder)
            return IncrementalDecoder(self.raw, True, drop, self._byte_table(not drop))
        return IncrementalDecoder(
            self.raw, skip_special_tokens, table=self._byte_table(skip_special_tokens)
        )

    def _byte_table(self, skip_special_tokens: bool) -> list[bytes] | None:
        """Each id's bytes for `ByteStream` (None: not byte-level BPE)."""
        return self._byte_tables[skip_special_tokens]

    def special_ids_in(self, texts: tuple[str, ...]) -> frozenset[int]:
        """The special tokens the given texts (markers) are written with
        (asked per request, for a parser's few markers: remembered)."""
        known = self._special_in.get(texts)
        if known is None:
            found: set[int] = set()
            for text in texts:
                found.update(i for i in self.encode(text) if i in self.special_ids)
            known = self._special_in[texts] = frozenset(found)
        return known

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for, even when they are part of a UTF-8
        character (its own decode is then U+FFFD): byte-level BPE tokens map
        back through the byte alphabet, SentencePiece byte tokens are <0xXX>."""
        text = self.raw.decode([token_id], skip_special_tokens=False)
        if "\ufffd" not in text:
            return text.encode()
        piece = self.raw.id_to_token(token_id) or ""
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            return bytes([int(piece[3:5], 16)])
        raw = piece_bytes(piece) if piece else None
        return raw if raw is not None else text.encode()

    def token_to_id(self, token: str) -> int | None:
        return self.raw.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.raw.id_to_token(token_id)
