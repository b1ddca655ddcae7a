"""The text access line's words: whatever a client puts in a path or a model
name stays one word on one line, and reads back as what it was."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from rotor.api.access_log import _word


@given(st.text())
def test_any_text_is_one_word_on_one_line(text: str) -> None:
    word = _word(text)
    assert len(word.splitlines()) == 1
    if word == text:
        assert word.split() == [word]
    else:
        assert word.isascii() and json.loads(word) == text


def test_plain_words_stay_plain() -> None:
    assert _word("/v1/chat/completions") == "/v1/chat/completions"
    assert _word("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert _word("a b") == '"a b"'
    assert _word("") == '""'
