"""A synthetic mix of prompt-length classes, e.g. long and short prompts
(`--mix long=8000:16000@0.3,short=100:1000`): the workload of disaggregated
serving, where long prompts' prefills stall the short ones' decoding.

Each class is NAME=MIN:MAX (or NAME=N) prompt tokens, uniform in between,
with an optional @SHARE of the requests. Classes without a share split what
the others leave of 1; when every class has one, the shares are relative.
Lengths are tokens of the server's tokenizer (converted to words with its
measured tokens per word), unlike --input-len's words. Every request records
its class, and the summary has each class's latencies.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count

from rotor.bench.tokens import words_for
from rotor.bench.workload import Conversation, Turn, sample_len, words

_ITEM = re.compile(
    r"\s*([A-Za-z_][\w-]*)\s*=\s*(\d+)\s*(?::\s*(\d+)\s*)?(?:@\s*([0-9]*\.?[0-9]+)\s*)?"
)


@dataclass(frozen=True)
class MixClass:
    name: str
    min_tokens: int
    max_tokens: int
    share: float  # of the requests, the shares summing to 1


def parse_mix(text: str) -> tuple[MixClass, ...]:
    """'long=8000:16000@0.3,short=100:1000' → the classes with their shares."""
    items: list[tuple[str, int, int, float | None]] = []
    for item in filter(str.strip, text.split(",")):
        m = _ITEM.fullmatch(item)
        if not m:
            raise ValueError(
                f"--mix: {item.strip()!r} is not NAME=MIN:MAX[@SHARE] (tokens), "
                "e.g. long=8000:16000@0.3"
            )
        lo = int(m[2])
        hi = int(m[3]) if m[3] is not None else lo
        if not 1 <= lo <= hi:
            raise ValueError(f"--mix: {item.strip()!r}: need 1 ≤ MIN ≤ MAX")
        share = float(m[4]) if m[4] is not None else None
        if share is not None and not share > 0:
            raise ValueError(f"--mix: {item.strip()!r}: a share must be positive")
        items.append((m[1], lo, hi, share))
    if not items:
        raise ValueError("--mix: no classes given")
    names = [i[0] for i in items]
    if len(set(names)) != len(names):
        raise ValueError(f"--mix: a class name twice ({', '.join(names)})")
    given = sum(s for *_, s in items if s is not None)
    open_ = [i for i in items if i[3] is None]
    if open_ and given >= 1:
        raise ValueError(f"--mix: the shares given sum to {given:g}; nothing left for the rest")
    rest = (1 - given) / len(open_) if open_ else 0.0  # the classes with no share split it
    scale = 1.0 if open_ else given  # every share given: they are made to sum to 1
    return tuple(MixClass(n, lo, hi, rest if s is None else s / scale) for n, lo, hi, s in items)


def mixed(
    classes: tuple[MixClass, ...],
    tokens_per_word: float,
    output_len: int,
    output_len_std: float,
    rng: random.Random,
) -> Iterator[Conversation]:
    """One-turn requests without end: a class drawn by share, a length in it."""
    shares = [c.share for c in classes]
    for i in count():
        c = rng.choices(classes, shares)[0]
        n_tokens = rng.randint(c.min_tokens, c.max_tokens)
        text = words(rng, words_for(n_tokens, tokens_per_word))
        n_out = sample_len(rng, output_len, output_len_std)
        yield Conversation((Turn(text, n_out),), index=i, tag=c.name)
