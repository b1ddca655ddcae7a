"""The chat prompt cache gives exactly the ids one `encode` gives, for any
text and any history of earlier texts, and remembers what it should."""

from __future__ import annotations

from typing import Any

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, models, normalizers, pre_tokenizers

from rotor.model.builtin import CHATML_ADDED, CHATML_SPECIAL, build_tokenizer, builtin_test_model
from rotor.model.segments import SegmentCache

from support.trained import Counting, trained_bpe

CORPUS = ["hello world, the quick brown fox", "numbers 123 4567", "Zürich 東京 🙂 ok", "a b c"]

FRAGMENTS = [
    *CHATML_SPECIAL,
    *CHATML_ADDED,
    "<|im_",
    "|>",
    "<",
    "think>",
    "user\n",
    "assistant\n",
    "\n",
    " ",
    "  ",
    "\t",
    "hello",
    " world",
    "fox,",
    "123",
    "Zürich",
    "東京",
    "🙂",
    "é",
    "ab",
    "xa",
    "b",
    "c",
]

texts = st.lists(st.sampled_from(FRAGMENTS), max_size=30).map("".join)


def chatml() -> tokenizers.Tokenizer:
    return build_tokenizer(CHATML_SPECIAL, CHATML_ADDED, CORPUS, 400)


def bpe(pre_tokenizer: Any, normalizer: Any = None) -> tokenizers.Tokenizer:
    return trained_bpe(pre_tokenizer, CORPUS, normalizer)


def with_overlapping_tokens() -> tokenizers.Tokenizer:
    """`ab` is matched on the raw text first; `xa` (normalized) only in what is
    left, so `xab` is `x` + `ab`, never `xa` + `b`; `abc` is longer than `ab`."""
    tok = bpe(pre_tokenizers.ByteLevel(add_prefix_space=False))
    tok.add_special_tokens(
        [AddedToken("ab", normalized=False), AddedToken("abc", normalized=False)]
    )
    tok.add_tokens([AddedToken("xa", normalized=True)])
    return tok


SHAPES = {
    "chatml": chatml,
    "prefix space": lambda: bpe(pre_tokenizers.ByteLevel(add_prefix_space=True)),
    "split + byte level": lambda: bpe(
        pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(tokenizers.Regex(r"\p{N}{1,3}"), "isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    ),
    "metaspace always": lambda: bpe(pre_tokenizers.Metaspace(prepend_scheme="always")),
    "NFC, raw added tokens": lambda: bpe(pre_tokenizers.ByteLevel(), normalizers.NFC()),
    "overlapping added tokens": with_overlapping_tokens,
}


@pytest.mark.parametrize("shape", SHAPES)
@settings(max_examples=150, deadline=None)
@given(history=st.lists(texts, max_size=4), text=texts)
def test_the_cache_gives_what_one_encode_gives(shape: str, history: list[str], text: str) -> None:
    tok = SHAPES[shape]()
    cache = SegmentCache.build(tok, max_tokens=40)  # small: forgetting is exercised too
    assert cache is not None
    for earlier in history:
        cache.encode(earlier)
    assert cache.encode(text) == tok.encode(text, add_special_tokens=False).ids
    assert cache.encode(text) == tok.encode(text, add_special_tokens=False).ids  # remembered


def test_overlapping_added_tokens_are_matched_as_the_tokenizer_matches_them() -> None:
    tok = with_overlapping_tokens()
    cache = SegmentCache.build(tok)
    assert cache is not None
    ab = tok.token_to_id("ab")
    ids = tok.encode("xab", add_special_tokens=False).ids
    assert ids[-1] == ab and cache.encode("xab") == ids
    abc = tok.token_to_id("abc")
    assert tok.encode("abc", add_special_tokens=False).ids == [abc] == cache.encode("abc")


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: bpe(pre_tokenizers.Metaspace(prepend_scheme="first")), id="metaspace first"
        ),
        pytest.param(
            lambda: _added(bpe(pre_tokenizers.ByteLevel()), AddedToken("<x>", lstrip=True)),
            id="lstrip",
        ),
        pytest.param(
            lambda: _added(bpe(pre_tokenizers.ByteLevel()), AddedToken("<x>", single_word=True)),
            id="single word",
        ),
        pytest.param(
            lambda: _added(
                bpe(pre_tokenizers.ByteLevel(), normalizers.Lowercase()),
                AddedToken("Hi", normalized=True),
            ),
            id="tokens matched after a normalizer",
        ),
        pytest.param(lambda: tokenizers.Tokenizer(models.BPE(dropout=0.5)), id="dropout"),
    ],
)
def test_a_tokenizer_whose_pieces_depend_on_each_other_gets_no_cache(make: Any) -> None:
    assert SegmentCache.build(make()) is None


def _added(tok: tokenizers.Tokenizer, token: AddedToken) -> tokenizers.Tokenizer:
    tok.add_tokens([token])
    return tok


def test_a_growing_conversation_tokenizes_only_its_new_messages() -> None:
    tok = chatml()
    counting = Counting(tok)
    cache = SegmentCache.build(counting, words=False)  # type: ignore[arg-type]
    assert cache is not None
    turn1 = "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n"
    turn2 = (
        turn1
        + "the quick fox<|im_end|>\n<|im_start|>user\n123 東京<|im_end|>\n<|im_start|>assistant\n"
    )
    assert cache.encode(turn1) == tok.encode(turn1).ids
    assert counting.asked == ["user\nhello world", "\n", "assistant\n"]
    counting.asked.clear()
    assert cache.encode(turn2) == tok.encode(turn2).ids
    assert counting.asked == ["assistant\nthe quick fox", "user\n123 東京"]


def test_what_is_remembered_stays_within_its_bound() -> None:
    tok = chatml()
    cache = SegmentCache.build(tok, max_tokens=50, max_chars=120)
    assert cache is not None
    for i in range(40):
        text = f"<|im_start|>user\nhello {i} world fox {i * 7}<|im_end|>\n" + " " * (i % 9)
        assert cache.encode(text) == tok.encode(text).ids
        ids, chars = cache.held
        assert 0 < ids <= 50 and 0 < chars <= 120
    long_piece = "hello " * 40  # more text than the whole cache may hold: not kept
    assert cache.encode(long_piece) == tok.encode(long_piece).ids
    assert cache.held[1] <= 120


def test_the_built_in_model_encodes_chats_through_the_cache() -> None:
    _, tok = builtin_test_model()
    text = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    assert tok._segments is not None
    assert tok.encode_chat(text) == tok.encode(text)
