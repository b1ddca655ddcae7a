"""WordEncoder gives exactly the ids the tokenizer's own `encode` gives, for
any ASCII text, over the pre-tokenizers real byte-level models ship; and it
declines every tokenizer it cannot follow exactly."""

from __future__ import annotations

import re
from typing import Any

import pytest
import tokenizers
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tokenizers import normalizers, pre_tokenizers

import rotor.model.words as words_module
from rotor.model.segments import SegmentCache
from rotor.model.words import GPT2_PATTERN, WordEncoder, ascii_pattern

from support.trained import Counting, trained_bpe

# The patterns of Llama 3, Qwen2 and o200k (gpt-oss), as their tokenizer.json write them.
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
O200K = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# DeepSeek V3 cuts in three passes: digits, CJK runs, then words.
DEEPSEEK = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]

CORPUS = [
    "Hello world, it's the quick brown fox. We'll see; they've gone!",
    "def main(argv):\n    return 1234 + 56789  # done\n\n\tx = [a, b]\r\n",
    "THE QUICK DON'T I'M 2024-12-01 12:30:45 user@example.com ~/path/to/file.py",
    "    indented    lines   \n\n\n   and  trailing  ",
]


def bpe(pre_tokenizer: Any, normalizer: Any = None, **model: Any) -> tokenizers.Tokenizer:
    return trained_bpe(pre_tokenizer, CORPUS, normalizer, vocab_size=500, **model)


def split_then_bytes(*patterns: str, use_regex: bool = False) -> Any:
    splits = [pre_tokenizers.Split(tokenizers.Regex(p), "isolated") for p in patterns]
    return pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)]
    )


SHAPES = {
    "gpt-2": lambda: bpe(pre_tokenizers.ByteLevel(add_prefix_space=False)),
    "llama 3 (ignore_merges)": lambda: bpe(split_then_bytes(LLAMA3), ignore_merges=True),
    "qwen2 (NFC)": lambda: bpe(split_then_bytes(QWEN2), normalizers.NFC()),
    "o200k": lambda: bpe(split_then_bytes(O200K)),
    "deepseek v3": lambda: bpe(split_then_bytes(*DEEPSEEK)),
    "digits, then gpt-2": lambda: bpe(split_then_bytes(r"\p{N}{1,3}", use_regex=True)),
}

FRAGMENTS = [
    "'s", "'S", "'ll", "'LL", "'re", "'", "''", "don't", "Hello", "HELLO", "hello", "CamelCase",
    " the", "  ", "   ", " ", "\t", "\n", "\n\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f",
    "\x00", "\x7f", "1", "12", "123", "12345", ",", ".", "...", "!?", "(x)", "[]", "{}", "/",
    "//", "_", "__init__", "-", "+=", "@", "#", "$5", "%", "^", "`", "~", "|", "\\", "\"",
]  # fmt: skip

ascii_texts = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=80),
)


@pytest.fixture(scope="module", params=list(SHAPES))
def shape(request: pytest.FixtureRequest) -> tuple[tokenizers.Tokenizer, WordEncoder]:
    tok = SHAPES[request.param]()
    encoder = WordEncoder.build(tok)
    assert encoder is not None, request.param
    return tok, encoder


@settings(max_examples=300, deadline=None)
@given(text=ascii_texts)
def test_ascii_text_gets_the_words_and_ids_the_tokenizer_gives(
    shape: tuple[tokenizers.Tokenizer, WordEncoder], text: str
) -> None:
    tok, encoder = shape
    # Its contract: text with no added token in it (segments.py cuts those out first)
    assume(not any(t.content in text for t in tok.get_added_tokens_decoder().values()))
    assert encoder.words(text) == [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(text)]
    want = tok.encode(text, add_special_tokens=False).ids
    assert encoder.encode(text) == want
    assert encoder.encode(text) == want  # again, from the remembered words


def test_text_with_anything_but_ascii_is_left_to_the_tokenizer() -> None:
    encoder = WordEncoder.build(SHAPES["gpt-2"]())
    assert encoder is not None
    assert encoder.encode("café") is None
    assert encoder.encode("plain") is not None


def test_a_full_word_memory_starts_again_and_stays_exact() -> None:
    tok = SHAPES["gpt-2"]()
    encoder = WordEncoder.build(tok, max_words=3)
    assert encoder is not None
    for text in CORPUS * 2:
        assert encoder.encode(text) == tok.encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: bpe(pre_tokenizers.ByteLevel(), normalizers.Lowercase()), id="lowercase"
        ),
        pytest.param(
            lambda: bpe(pre_tokenizers.ByteLevel(add_prefix_space=True)), id="prefix space"
        ),
        pytest.param(
            lambda: bpe(pre_tokenizers.Metaspace(prepend_scheme="always")), id="metaspace"
        ),
        pytest.param(lambda: bpe(pre_tokenizers.Whitespace()), id="no byte level"),
        pytest.param(lambda: bpe(pre_tokenizers.ByteLevel(), dropout=0.5), id="dropout"),
        pytest.param(
            lambda: bpe(
                pre_tokenizers.Sequence(
                    [
                        pre_tokenizers.Split(tokenizers.Regex(r"\p{N}"), "isolated", invert=True),
                        pre_tokenizers.ByteLevel(use_regex=False),
                    ]
                )
            ),
            id="inverted split",
        ),
        pytest.param(
            lambda: bpe(
                pre_tokenizers.Sequence(
                    [
                        pre_tokenizers.Split(tokenizers.Regex(r"\p{N}"), "removed"),
                        pre_tokenizers.ByteLevel(use_regex=False),
                    ]
                )
            ),
            id="split that removes",
        ),
        pytest.param(lambda: bpe(split_then_bytes(r"\h+|\S+|\s+")), id="untranslated escape"),
        pytest.param(lambda: bpe(split_then_bytes(r"\p{Han}+|\S+|\s+")), id="script property"),
    ],
)
def test_a_tokenizer_it_cannot_follow_exactly_gets_no_encoder(make: Any) -> None:
    assert WordEncoder.build(make()) is None


def test_a_translation_that_disagrees_on_the_probes_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`\\s` written as Python's own `\\s` (which also takes \\x1c-\\x1f):
    the probe texts catch it and the tokenizer is left to itself."""
    tok = SHAPES["llama 3 (ignore_merges)"]()
    assert WordEncoder.build(tok) is not None
    monkeypatch.setitem(words_module._SETS, "s", (r"\s", r"\s"))
    assert WordEncoder.build(tok) is None


@pytest.mark.parametrize(
    ("pattern", "text", "words"),
    [
        (GPT2_PATTERN, "it's  a\x1c b", ["it", "'s", " ", " a", "\x1c", " b"]),
        (LLAMA3, "I'LL 12345\r\n\n", ["I", "'LL", " ", "123", "45", "\r\n\n"]),
        (r"(\p{L})+|\s+", "ab cd", ["ab", " ", "cd"]),  # a group that captured would cut "b"
        (r"[\p{M}a]+|\p{Lo}|\s+|.", "aab a", ["aa", "b", " ", "a"]),  # no ASCII M or Lo
    ],
)
def test_patterns_cut_ascii_as_the_tokenizer_does(
    pattern: str, text: str, words: list[str]
) -> None:
    translated = ascii_pattern(pattern)
    assert translated is not None
    assert re.findall(translated, text) == words


@pytest.mark.parametrize(
    "pattern", [r"\P{L}", r"[[a-z]]", r"[a-z&&[^b]]", r"^a", r"a$", r"(?m:a)", r"\bx", r"[\S]"]
)
def test_constructs_not_translated_are_refused(pattern: str) -> None:
    assert ascii_pattern(pattern) is None


def test_a_conversation_of_ascii_pieces_never_reaches_the_tokenizer_and_stays_exact() -> None:
    tok = SHAPES["llama 3 (ignore_merges)"]()
    counting = Counting(tok)
    cache = SegmentCache.build(counting)  # type: ignore[arg-type]
    assert cache is not None
    text = "<|im_start|>user\nWe'll see, 12345 times!<|im_end|>\n<|im_start|>assistant\nÜber"
    assert cache.encode(text) == tok.encode(text, add_special_tokens=False).ids
    assert counting.asked == ["assistant\nÜber"]
