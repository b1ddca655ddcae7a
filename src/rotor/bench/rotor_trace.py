"""rotor's own request log as a trace (`--trace-format rotor`): the file that
`rotor run` / `rotor frontend --request-log FILE` wrote (`.gz` or not, rotated
files concatenated with `cat`, or a log still being written: its whole lines
so far), one record a line.

Each record that got a response (it has `prompt_tokens`) is replayed at its
`arrival`, with a prompt of its `prompt_tokens` and `max_tokens` its
`completion_tokens` (ignore_eos, as for Mooncake traces); records of requests
refused before they began are not.

Prefix sharing (`--request-log-hashes`): a record's `block_hashes` are rotor's
KV block hashes of its prompt, and a block's hash names its whole prefix. So
the prompts are Mooncake prompts (bench/mooncake.py does the text) whose hash
ids are those hashes: records with the same leading blocks send the same
leading text, and a KV-aware router or a prefix cache sees the log's reuse.
Text is made per piece of `m` KV blocks, where `m` is the fewest that make a
piece of at least MIN_WORDS words at the server's tokens per word (a word is
a whole number of tokens only on average: pieces of a few words would miss
their lengths by up to half a word each); a piece's id is the hash of its last
block, so two prompts share pieces as long as they share all of a piece's
blocks. What follows the last shared piece, and every prompt of a log
without hashes, is text of the record's own.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rotor.bench.mooncake import MooncakeTrace, Row, json_object
from rotor.bench.workload import Conversation

if TYPE_CHECKING:
    from rotor.bench.trace import TraceOptions

MIN_WORDS = 16  # words of one piece of shared text, at least
_U64 = 1 << 64
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Logged:
    """One replayable record of the log."""

    arrival_ms: float
    prompt_tokens: int
    completion_tokens: int
    block_hashes: tuple[int, ...] = ()


def _count(obj: dict[str, Any], key: str, where: str) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"{where}: {key!r} must be an integer ≥ 0, got {v!r}")
    return v


def parse_line(raw: bytes, where: str) -> tuple[Logged | None, int | None]:
    """One line, checked: the record (None when it has no response to
    replay) and the block size its hashes are of (None without hashes)."""
    obj = json_object(raw, where)
    arrival = obj.get("arrival")
    if not isinstance(arrival, (int, float)) or isinstance(arrival, bool) or not arrival >= 0:
        raise ValueError(f"{where}: 'arrival' must be unix seconds ≥ 0, got {arrival!r}")
    if "prompt_tokens" not in obj:
        return None, None  # refused before it began: nothing to replay
    prompt = _count(obj, "prompt_tokens", where)
    answer = _count(obj, "completion_tokens", where)
    if prompt == 0:
        return None, None
    hashes = obj.get("block_hashes")
    if hashes is None:
        return Logged(arrival * 1000.0, prompt, answer), None
    if not isinstance(hashes, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and 0 <= h < _U64 for h in hashes
    ):
        raise ValueError(f"{where}: 'block_hashes' must be a list of unsigned 64-bit integers")
    size = obj.get("block_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"{where}: 'block_size' must be a positive integer, got {size!r}")
    if len(hashes) * size > prompt:
        raise ValueError(
            f"{where}: {len(hashes)} block hashes of {size} tokens are more than its "
            f"{prompt} prompt tokens"
        )
    return Logged(arrival * 1000.0, prompt, answer, tuple(hashes)), size


def blocks_per_piece(block_size: int, tokens_per_word: float) -> int:
    """KV blocks per piece of text: the fewest that make MIN_WORDS words."""
    return max(1, math.ceil(MIN_WORDS * tokens_per_word / block_size))


def hash_ids(logged: Logged, piece_tokens: int, per_piece: int, own: Iterator[int]) -> list[int]:
    """The record's Mooncake hash ids with pieces of `piece_tokens` tokens
    (`per_piece` KV blocks): the hash of each whole piece's last block while
    the hashes last, then ids of its own (negative: never a hash) for the rest."""
    n = logged.prompt_tokens
    hashes = logged.block_hashes
    shared = min(len(hashes) // per_piece, n // piece_tokens)
    ids = [hashes[(j + 1) * per_piece - 1] for j in range(shared)]
    rest = n - shared * piece_tokens
    ids += [next(own) for _ in range(-(-rest // piece_tokens))]
    return ids


class RotorTrace:
    """A request log's replayable records in arrival order."""

    in_tokens = True

    def __init__(self, records: list[Logged], block_size: int | None, text_block: int) -> None:
        """`block_size`: the hashes' (None: the log has none); `text_block`:
        tokens per piece of text where there are none (--trace-block-size)."""
        self.records = records
        self.block_size = block_size
        self.text_block = text_block
        self.timestamps_ms = [r.arrival_ms for r in records]

    def rows(self, tokens_per_word: float) -> tuple[list[Row], int]:
        """The records as Mooncake rows, and their tokens per hash id."""
        if self.block_size is None:
            per_piece, piece = 1, self.text_block
        else:
            per_piece = blocks_per_piece(self.block_size, tokens_per_word)
            piece = per_piece * self.block_size
        own = itertools.count(-1, -1)
        rows = [
            Row(r.arrival_ms, r.prompt_tokens, max(1, r.completion_tokens),
                tuple(hash_ids(r, piece, per_piece, own)))
            for r in self.records
        ]  # fmt: skip
        return rows, piece

    def conversations(self, tokens_per_word: float | None, seed: str) -> Iterator[Conversation]:
        if tokens_per_word is None:
            raise ValueError("a rotor request log needs the server's tokens per word")
        rows, piece = self.rows(tokens_per_word)
        return MooncakeTrace(rows, piece).conversations(tokens_per_word, seed)


def _lines(path: Path) -> list[bytes]:
    """The file's lines: gunzipped when it is gzip (by its first bytes, so
    rotated `FILE.gz.1` and `cat`ed files too); a log still being written
    ends in a gzip member without its end, whose lines so far are read."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"--trace {path}: {e.strerror or e}") from None
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(data, path)
    return data.splitlines()


def _gunzip(data: bytes, path: Path) -> bytes:
    """Every gzip member's bytes, the last one's as far as it goes."""
    out = []
    while data:
        unzip = zlib.decompressobj(wbits=31)
        try:
            out.append(unzip.decompress(data))
        except zlib.error as e:
            raise ValueError(f"--trace {path}: not a gzip file ({e})") from None
        if not unzip.eof:  # a member without its end: a log being written
            out[-1] = out[-1][: out[-1].rfind(b"\n") + 1]  # its whole lines
            break
        data = unzip.unused_data
    return b"".join(out)


def read(path: Path, options: TraceOptions) -> RotorTrace:
    """Every line of `path`, checked; the replayable records sorted by arrival (stable)."""
    records: list[Logged] = []
    block_size: int | None = None
    first_at = 0
    for lineno, raw in enumerate(_lines(path), 1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        logged, size = parse_line(raw, where)
        if logged is None:
            continue
        if size is not None:
            if block_size is None:
                block_size, first_at = size, lineno
            elif size != block_size:
                raise ValueError(
                    f"{where}: block_size {size}, but line {first_at}'s is {block_size}: "
                    "replay one model's records"
                )
        records.append(logged)
    if not records:
        raise ValueError(f"--trace {path}: no requests that got a response")
    records.sort(key=lambda r: r.arrival_ms)
    return RotorTrace(records, block_size, options.block_size)
