"""Seeded workloads: what each request asks for, independent of the API.

Lengths are in words drawn from a list of common English words (one such word
is about one token for real BPE tokenizers); the true token counts are always
the server's usage, never guessed here. Every generator takes its own
`random.Random`, so one seed gives the same prompts on every run.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from rotor.bench.images import BenchImage, ImageSpec, with_images

if TYPE_CHECKING:
    from rotor.bench.mix import MixClass

WORDS = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy music market sense nation plan college interest death "
    "experience effect use class control care field development role effort rate heart drug "
    "show leader light voice wife police mind price report decision son view relationship town "
    "road arm difference value building action model season society tax director position "
    "player record paper space ground form event official matter center couple site project "
    "activity star table need court oil situation cost industry figure street image phone data "
    "picture practice piece land product doctor wall patient worker news test movie north love "
    "support technology step baby computer type attention film tree source organization hair "
    "window evidence population site river garden stone cloud bridge engine signal token"
).split()


@dataclass(frozen=True)
class Turn:
    """One user message (its text, and images with --images-per-request) and
    how many tokens its answer may have."""

    text: str
    max_tokens: int
    images: tuple[BenchImage, ...] = ()


@dataclass(frozen=True)
class Conversation:
    """A request (one turn) or a conversation that grows: turn k is sent with
    `history`, then every earlier turn and the server's answer to it."""

    turns: tuple[Turn, ...]
    history: tuple[dict[str, Any], ...] = ()
    index: int = 0
    tag: str | None = None  # its class in a --mix, recorded with each request


@dataclass(frozen=True)
class WorkloadSpec:
    """What to generate. `shared_prefix` is (number of prefixes, words each):
    every prompt starts with one of them and is filled up to `input_len` with
    its own words."""

    input_len: int = 512
    input_len_std: float = 0.0
    output_len: int = 128
    output_len_std: float = 0.0
    shared_prefix: tuple[int, int] | None = None
    turns: int = 1
    dataset: Path | None = None
    mix: tuple[MixClass, ...] | None = None  # prompt-length classes, in tokens
    tokens_per_word: float | None = None  # the server's, for lengths in tokens
    images: ImageSpec | None = None  # images on every user message


def sample_len(rng: random.Random, mean: int, std: float) -> int:
    """A normal draw rounded to a whole length of at least 1."""
    if std <= 0:
        return max(1, mean)
    return max(1, round(rng.gauss(mean, std)))


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, k=n))


def make_prefixes(rng: random.Random, num: int, length: int) -> list[str]:
    return [words(rng, length) for _ in range(num)]


def synthetic(spec: WorkloadSpec, rng: random.Random) -> Iterator[Conversation]:
    """Random-word conversations without end; the first `spec.turns` × k
    requests are the same for the same seed."""
    shared = spec.shared_prefix
    prefixes = make_prefixes(rng, *shared) if shared else []
    prefix_len = shared[1] if shared else 0
    for i in count():
        turns = []
        for t in range(spec.turns):
            n_in = sample_len(rng, spec.input_len, spec.input_len_std)
            n_out = sample_len(rng, spec.output_len, spec.output_len_std)
            if prefixes and t == 0:
                prefix = rng.choice(prefixes)
                n_own = max(1, n_in - prefix_len)
                text = prefix + " " + words(rng, n_own)
            else:
                text = words(rng, n_in)
            turns.append(Turn(text, n_out))
        yield Conversation(tuple(turns), index=i)


def load_dataset(path: Path, default_max_tokens: int) -> list[Conversation]:
    """A JSONL file, one request a line: {"prompt": "..."} or {"messages": [...]}
    (the last one a user message with string content), optional "max_tokens"."""
    out: list[Conversation] = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise ValueError(f"{where}: not JSON ({e})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{where}: expected an object")
        max_tokens = obj.get("max_tokens", default_max_tokens)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValueError(f"{where}: max_tokens must be a positive integer")
        if isinstance(obj.get("prompt"), str):
            turn, history = Turn(obj["prompt"], max_tokens), ()
        elif isinstance(obj.get("messages"), list) and obj["messages"]:
            *rest, last = obj["messages"]
            if not (
                isinstance(last, dict)
                and last.get("role") == "user"
                and isinstance(last.get("content"), str)
            ):
                raise ValueError(f"{where}: the last message must be a user message with text")
            if not all(isinstance(m, dict) and "role" in m for m in rest):
                raise ValueError(f"{where}: every message needs a role")
            turn, history = Turn(last["content"], max_tokens), tuple(rest)
        else:
            raise ValueError(f'{where}: needs "prompt" (a string) or "messages" (a list)')
        out.append(Conversation((turn,), history, index=len(out)))
    if not out:
        raise ValueError(f"{path}: no requests")
    return out


def conversations(spec: WorkloadSpec, seed: int | str) -> Iterator[Conversation]:
    """The workload's conversations in order, without end (a dataset repeats).
    Images come from a generator of their own, so a workload's text is the
    same with images and without."""
    convs = texts(spec, seed)
    if spec.images is None:
        return convs
    return with_images(convs, spec.images, random.Random(f"{seed}:images"))


def texts(spec: WorkloadSpec, seed: int | str) -> Iterator[Conversation]:
    if spec.mix is not None:
        from rotor.bench.mix import mixed

        if spec.tokens_per_word is None:
            raise ValueError("a --mix needs the server's tokens per word")
        rng = random.Random(seed)
        yield from mixed(spec.mix, spec.tokens_per_word, spec.output_len, spec.output_len_std, rng)
    elif spec.dataset is not None:
        items = load_dataset(spec.dataset, spec.output_len)
        for i in count():
            item = items[i % len(items)]
            yield Conversation(item.turns, item.history, index=i)
    else:
        yield from synthetic(spec, random.Random(seed))
