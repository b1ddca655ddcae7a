"""Text of a target length in the server's tokens, without its tokenizer.

Traces and the long/short mix give lengths in tokens, but rotor bench drives
any server and knows no tokenizer, and the built-in word list costs one token
a word with real BPE tokenizers yet ~5 with the test model's small one. So the
server is asked: two prompts of random words that differ by a known number of
words, and the difference of their usage's prompt tokens is the tokens per
word (the chat template's own tokens cancel out). Words of the list tokenize
apart from their neighbours (byte-level pre-tokenizers split before a space),
so text built of words costs about the sum of its words.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from rotor.bench.workload import words

CALIBRATION_WORDS = (200, 1200)  # the two prompts' lengths; 1000 words apart


class Sender(Protocol):
    def body(self, messages: list[dict[str, Any]], max_tokens: int) -> bytes: ...
    async def send(self, body: bytes, origin: float) -> tuple[dict[str, Any], str]: ...


def words_for(tokens: int, tokens_per_word: float) -> int:
    """How many words make about `tokens` tokens; at least 1."""
    if not tokens_per_word > 0:
        raise ValueError(f"tokens per word must be positive, got {tokens_per_word}")
    return max(1, round(tokens / tokens_per_word))


def keyed_words(key: str, n: int) -> str:
    """`n` words that depend on `key` alone: the same key gives the same text,
    and a shorter text of one key is a prefix of a longer one."""
    return words(random.Random(key), n)


def tokens_per_word_from(short: dict[str, Any], long: dict[str, Any], extra_words: int) -> float:
    """The calibration's answer from the two requests' records."""
    for rec in (short, long):
        if rec.get("error"):
            err = rec["error"]
            raise ValueError(
                f"measuring tokens per word: the server refused ({err['kind']}): {err['message']}"
            )
        if rec.get("prompt_tokens") is None:
            raise ValueError(
                "measuring tokens per word: the server reported no prompt tokens; "
                "give --tokens-per-word"
            )
    diff: int = long["prompt_tokens"] - short["prompt_tokens"]
    if diff <= 0:
        raise ValueError(
            f"measuring tokens per word: {extra_words} more words cost {diff} more tokens; "
            "give --tokens-per-word"
        )
    return diff / extra_words


async def measure(client: Sender, origin: float, seed: int) -> tuple[float, list[dict[str, Any]]]:
    """The server's tokens per word of the built-in list, and the two
    requests' records (what they cost the server, for the accounting)."""
    recs = []
    for n in CALIBRATION_WORDS:
        text = keyed_words(f"calibration-{seed}-{n}", n)
        rec, _ = await client.send(client.body([{"role": "user", "content": text}], 1), origin)
        recs.append(rec)
    short, long = recs
    return tokens_per_word_from(short, long, CALIBRATION_WORDS[1] - CALIBRATION_WORDS[0]), recs
