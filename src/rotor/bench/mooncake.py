"""Mooncake-format traces: one JSON object a line, `{"timestamp": ms,
"input_length": N, "output_length": M, "hash_ids": [...]}`, as Mooncake
publishes its production traces (and aiperf and Dynamo replay them).

Each hash id stands for a block of `block_size` tokens that every request
listing it shares, so the prompt is one text per hash id, in order: requests
with the same leading hash ids send the same leading text, and a server's
prefix cache sees what the trace's did. The last block is partial: it takes
`input_length - (len(hash_ids) - 1) × block_size` tokens (its text is the
start of that hash id's full text). Lengths are converted to words with the
server's tokens per word (`tokens.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from rotor.bench.tokens import keyed_words, words_for
from rotor.bench.workload import Conversation, Turn

if TYPE_CHECKING:
    from rotor.bench.trace import TraceOptions

CACHED_BLOCKS = 4096  # block texts kept made: the shared ones are the hot ones


@dataclass(frozen=True)
class Row:
    """One request of the trace."""

    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _count(obj: dict[str, Any], key: str, where: str) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{where}: {key!r} must be a positive integer, got {v!r}")
    return v


def json_object(raw: bytes, where: str) -> dict[str, Any]:
    """One JSONL line as an object; a ValueError naming `where` when it is not one."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"{where}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object")
    return obj


def parse_line(raw: bytes, where: str, block_size: int) -> Row:
    """One line, checked: a clear message naming `where` when it is wrong."""
    obj = json_object(raw, where)
    ts = obj.get("timestamp")
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts < 0:
        raise ValueError(f"{where}: 'timestamp' must be a number of ms ≥ 0, got {ts!r}")
    n_in = _count(obj, "input_length", where)
    n_out = _count(obj, "output_length", where)
    ids = obj.get("hash_ids")
    if (
        not isinstance(ids, list)
        or not ids
        or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids)
    ):
        raise ValueError(f"{where}: 'hash_ids' must be a non-empty list of integers")
    if not (len(ids) - 1) * block_size < n_in <= len(ids) * block_size:
        raise ValueError(
            f"{where}: input_length {n_in} does not fit {len(ids)} hash ids of {block_size} "
            "tokens (the last one partial); is --trace-block-size right?"
        )
    return Row(float(ts), n_in, n_out, tuple(ids))


class MooncakeTrace:
    """A Mooncake trace's rows in send order."""

    in_tokens = True

    def __init__(self, rows: list[Row], block_size: int) -> None:
        self.rows = rows
        self.block_size = block_size
        self.timestamps_ms = [r.timestamp_ms for r in rows]

    def prompt(self, row: Row, tokens_per_word: float, seed: str, cache: dict[int, str]) -> str:
        """The row's prompt: each hash id's text, the last one cut to its share."""
        full = words_for(self.block_size, tokens_per_word)
        parts = []
        for h in row.hash_ids[:-1]:
            text = cache.get(h)
            if text is None:
                if len(cache) >= CACHED_BLOCKS:  # the oldest goes; it is made again if needed
                    del cache[next(iter(cache))]
                text = cache[h] = keyed_words(f"{seed}:{h}", full)
            parts.append(text)
        last = row.input_length - (len(row.hash_ids) - 1) * self.block_size
        parts.append(keyed_words(f"{seed}:{row.hash_ids[-1]}", words_for(last, tokens_per_word)))
        return " ".join(parts)

    def conversations(self, tokens_per_word: float | None, seed: str) -> Iterator[Conversation]:
        if tokens_per_word is None:
            raise ValueError("a Mooncake trace needs the server's tokens per word")
        cache: dict[int, str] = {}
        for i, row in enumerate(self.rows):
            text = self.prompt(row, tokens_per_word, seed, cache)
            yield Conversation((Turn(text, row.output_length),), index=i)


def read(path: Path, options: TraceOptions) -> MooncakeTrace:
    """Every line of `path`, checked; sorted by timestamp (stable)."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as e:
        raise ValueError(f"--trace {path}: {e.strerror}") from None
    rows = [
        parse_line(raw, f"{path}:{lineno}", options.block_size)
        for lineno, raw in enumerate(lines, 1)
        if raw.strip()
    ]
    if not rows:
        raise ValueError(f"--trace {path}: no requests")
    rows.sort(key=lambda r: r.timestamp_ms)
    return MooncakeTrace(rows, options.block_size)
