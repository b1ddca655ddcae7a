"""Token ids of chat prompts, their pieces remembered between requests.

A chat client sends the whole conversation every turn, so a frontend that
tokenizes each prompt from scratch spends most of its time on text it has
tokenized before: an agent's 40-turn conversation is re-read in full for
every new call. Hugging Face tokenizers cut a text at its added tokens
(`<|im_start|>`, `<|eot_id|>`, ...) first and tokenize every piece between
them on its own, so a piece's ids do not depend on what surrounds it: each
message's text, between the template's markers, can be remembered and the
prompt put together from the pieces, exactly as one `encode` would.

Exactly only holds for tokenizers whose pieces really are independent:
`SegmentCache.build` says None (encode whole) for any other: added tokens
that strip the whitespace next to them or match only single words, a
pre-tokenizer that treats the first piece differently (Metaspace's
`prepend_scheme: first`), a normalizer with added tokens matched after it,
BPE dropout.
"""

from __future__ import annotations

import collections
import re
import threading
from typing import Any

import tokenizers

from rotor.model.words import WordEncoder, component_state, cut_at

# Pre-tokenizers that split each piece on its own, with nothing kept from one
# piece to the next (ByteLevel's prefix space is added to every piece alike).
_PIECEWISE = {"ByteLevel", "Split", "Digits", "Punctuation", "Whitespace", "WhitespaceSplit"}

# What is remembered, all pieces together: ids (about 40 MB of Python lists at
# most) and the pieces' own text (a piece of few long tokens is mostly text).
DEFAULT_MAX_TOKENS = 1_000_000
DEFAULT_MAX_CHARS = 8_000_000


def _piecewise(pre_tokenizer: dict[str, Any] | None) -> bool:
    if pre_tokenizer is None:
        return True
    kind = pre_tokenizer.get("type")
    if kind == "Sequence":
        return all(_piecewise(p) for p in pre_tokenizer.get("pretokenizers", []))
    if kind == "Metaspace":
        return pre_tokenizer.get("prepend_scheme") in ("always", "never")
    return kind in _PIECEWISE


def _splitter(contents: list[str]) -> re.Pattern[str] | None:
    """Matches the leftmost, then longest, of `contents` (as the tokenizer's
    own added-token matcher does): alternatives longest first."""
    if not contents:
        return None
    ordered = sorted(set(contents), key=len, reverse=True)
    return re.compile("|".join(re.escape(c) for c in ordered))


class SegmentCache:
    """Encodes a text piece by piece (see the module's docstring), the pieces'
    ids remembered, least recently used forgotten first. Thread-safe: prompts
    are encoded on the event loop and in the prepare pool."""

    def __init__(
        self,
        tok: tokenizers.Tokenizer,
        raw_tokens: dict[str, int],
        normalized_tokens: dict[str, int],
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_chars: int = DEFAULT_MAX_CHARS,
        words: WordEncoder | None = None,
    ) -> None:
        self._tok = tok
        self._words = words  # new ASCII pieces, without the tokenizer's regex
        self._ids = {**normalized_tokens, **raw_tokens}
        # The tokenizer matches tokens that skip normalization first, on the
        # raw text, then the others in what is left.
        self._raw = _splitter(list(raw_tokens))
        self._normalized = _splitter(list(normalized_tokens))
        self._max_tokens = max_tokens
        self._max_chars = max_chars
        self._pieces: collections.OrderedDict[str, list[int]] = collections.OrderedDict()
        self._held = 0  # ids remembered
        self._held_chars = 0
        self._lock = threading.Lock()

    @classmethod
    def build(
        cls,
        tok: tokenizers.Tokenizer,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_chars: int = DEFAULT_MAX_CHARS,
        words: bool = True,
    ) -> SegmentCache | None:
        """A cache for `tok`, or None when its pieces are not independent.
        `words`: new ASCII pieces are cut by WordEncoder where it is exact
        (off: every new piece goes to the tokenizer)."""
        added = tok.get_added_tokens_decoder()
        if not added or getattr(tok, "encode_special_tokens", False):
            return None  # nothing to cut at, or special tokens are read as text
        if any(t.lstrip or t.rstrip or t.single_word for t in added.values()):
            return None
        if getattr(tok.model, "dropout", None):
            return None
        state = component_state(tok.pre_tokenizer)
        if not _piecewise(state):
            return None
        raw = {t.content: i for i, t in added.items() if not t.normalized}
        normalized = {t.content: i for i, t in added.items() if t.normalized}
        if normalized and tok.normalizer is not None:
            return None  # they are matched in normalized text: not what a split here sees
        encoder = WordEncoder.build(tok) if words else None
        return cls(tok, raw, normalized, max_tokens, max_chars, encoder)

    def encode(self, text: str) -> list[int]:
        """The ids `tok.encode(text, add_special_tokens=False)` gives."""
        pieces = self._split(text)
        known: dict[str, list[int]] = {}
        with self._lock:
            for piece in pieces:
                if isinstance(piece, str) and piece not in known:
                    ids = self._recall(piece)
                    if ids is not None:
                        known[piece] = ids
        missing = list(dict.fromkeys(p for p in pieces if isinstance(p, str) and p not in known))
        if missing:
            for piece, ids in zip(missing, self._encode(missing), strict=True):
                known[piece] = ids
            with self._lock:
                for piece in missing:
                    self._remember(piece, known[piece])
        out: list[int] = []
        for piece in pieces:
            if isinstance(piece, int):
                out.append(piece)
            else:
                out.extend(known[piece])
        return out

    def _encode(self, pieces: list[str]) -> list[list[int]]:
        """Each piece's ids: ASCII ones word by word (WordEncoder), the
        others by the tokenizer, all of those in one call."""
        words = self._words
        found = [words.encode(p) if words is not None else None for p in pieces]
        rest = [p for p, ids in zip(pieces, found, strict=True) if ids is None]
        if not rest:
            return [ids for ids in found if ids is not None]  # every one
        encoded = iter(self._tok.encode_batch_fast(rest, add_special_tokens=False))
        return [next(encoded).ids if ids is None else ids for ids in found]

    @property
    def held(self) -> tuple[int, int]:
        """(ids, characters) remembered now, all pieces together."""
        return self._held, self._held_chars

    def _split(self, text: str) -> list[str | int]:
        """`text` as pieces to tokenize (str) and added tokens (their ids)."""
        pieces: list[str | int] = []
        for part in self._cut(self._raw, text):
            if isinstance(part, str):
                pieces.extend(self._cut(self._normalized, part))
            else:
                pieces.append(part)
        return pieces

    def _cut(self, pattern: re.Pattern[str] | None, text: str) -> list[str | int]:
        return [text] if pattern is None else cut_at(pattern, text, self._ids.__getitem__)

    def _recall(self, piece: str) -> list[int] | None:
        ids = self._pieces.get(piece)
        if ids is not None:
            self._pieces.move_to_end(piece)
        return ids

    def _remember(self, piece: str, ids: list[int]) -> None:
        if piece in self._pieces or len(ids) > self._max_tokens or len(piece) > self._max_chars:
            return
        self._pieces[piece] = ids
        self._held += len(ids)
        self._held_chars += len(piece)
        while self._held > self._max_tokens or self._held_chars > self._max_chars:
            old_piece, old = self._pieces.popitem(last=False)
            self._held -= len(old)
            self._held_chars -= len(old_piece)
