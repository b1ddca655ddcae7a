"""rotor's byte-level incremental decoder (model/byte_stream.py) against the
one it stands in for, `tokenizers.decoders.DecodeStream`: token for token the
same answer, on any id sequence — ill-formed UTF-8, special and added tokens
(skipped or kept), tokens outside the vocabulary — and never chosen for a
tokenizer whose decoder is not plain ByteLevel."""

from __future__ import annotations

import functools

import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, decoders
from tokenizers.decoders import DecodeStream

from rotor.model.builtin import build_tokenizer
from rotor.model.byte_stream import ByteStream, byte_table, skipping
from rotor.model.tokenizer import IncrementalDecoder, Tokenizer

from support.byte_bpe import ADDED, SPECIAL, byte_chars
from support.trained import trained_bpe


@functools.cache
def raw() -> tokenizers.Tokenizer:
    """The decoder tests' byte-level BPE, plus added tokens whose text is
    not all in the byte alphabet (a space, a non-Latin letter): those decode
    as their own UTF-8."""
    tok = build_tokenizer(SPECIAL, ADDED)
    tok.add_tokens([AddedToken("two words", special=False), AddedToken("日本", special=False)])
    tok.add_special_tokens([AddedToken("<sp ecial>", special=True)])
    return tok


def vocab() -> int:
    return raw().get_vocab_size(with_added_tokens=True)


def single_byte(b: int) -> int:
    """The id of the token that is UTF-8 byte `b` alone."""
    found = raw().token_to_id(byte_chars()[b])
    assert found is not None
    return found


# Ids anywhere in the vocabulary (and a few past it), mixed with lone bytes
# that make and break multi-byte characters.
_ids = st.lists(
    st.one_of(
        st.integers(0, vocab() + 3),
        st.integers(0x80, 0xFF).map(single_byte),
        st.sampled_from([0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80]).map(single_byte),
    ),
    max_size=60,
)


def reference(ids: list[int], skip: bool) -> list[str | None]:
    stream = DecodeStream(skip_special_tokens=skip)
    return [stream.step(raw(), i) for i in ids]


def ours(ids: list[int], skip: bool) -> list[str | None]:
    table = byte_table(raw())
    assert table is not None
    if skip:
        special = (i for i, t in raw().get_added_tokens_decoder().items() if t.special)
        table = skipping(table, frozenset(special))
    stream = ByteStream(table)
    return [stream.step(i) for i in ids]


@settings(max_examples=400, deadline=None)
@given(_ids, st.booleans())
def test_every_step_is_decode_streams(ids: list[int], skip: bool) -> None:
    assert ours(ids, skip) == reference(ids, skip)


def test_ill_formed_bytes_are_released_as_decode_stream_releases_them() -> None:
    """A lone continuation byte, a truncated sequence followed by ASCII, a
    surrogate's encoding, then a character split over three tokens."""
    seqs = [[0x80, 0x41], [0xE2, 0x82, 0x41], [0xED, 0xA0, 0x80, 0x42], [0xE2, 0x82, 0xAC]]
    for skip in (True, False):
        for seq in seqs:
            ids = [single_byte(b) for b in seq]
            assert ours(ids, skip) == reference(ids, skip), seq
    euro = [single_byte(b) for b in "€".encode()]
    assert ours(euro, True) == [None, None, "€"]


@settings(max_examples=150, deadline=None)
@given(_ids, st.booleans(), st.sets(st.sampled_from(range(vocab())), max_size=6))
def test_the_tokenizers_decoders_keep_decode_streams_answers(
    ids: list[int], skip: bool, keep: set[int]
) -> None:
    """`Tokenizer.decoder` (rotor's stream) equals the DecodeStream it
    replaced, with special tokens skipped, kept, or skipped but for a few
    (a parser's reasoning tags: then the stream drops the rest itself)."""
    tok = raw()
    special = frozenset(i for i, t in tok.get_added_tokens_decoder().items() if t.special)
    kept = frozenset(keep) & special
    fast = Tokenizer(tok).decoder(skip, kept)
    if skip and kept:
        slow = IncrementalDecoder(tok, True, special - kept)
    else:
        slow = IncrementalDecoder(tok, skip)
    assert [fast.step(i) for i in ids] == [slow.step(i) for i in ids]


def test_the_tokenizer_chooses_the_byte_stream_only_for_byte_level_decoders() -> None:
    byte_level = Tokenizer(raw())
    assert byte_level._byte_table(True) is not None
    metaspace = trained_bpe(tokenizers.pre_tokenizers.Metaspace(), ["a b c", "hello world"])
    metaspace.decoder = decoders.Metaspace()
    assert byte_table(metaspace) is None
    assert Tokenizer(metaspace)._byte_table(True) is None
    text = "hello world"
    decoder = Tokenizer(metaspace).decoder(True)
    got = "".join(decoder.step(i) for i in metaspace.encode(text).ids)
    assert got.strip() == text
