"""Trace replay: requests sent at a recorded trace's timestamps, open loop.

Each trace format is a small reader (`FORMATS`): a function from the file and
the options to a `Trace`, which knows its send times and makes its requests.
The loop, the schedule and the lag report are the same for every format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rotor.bench import mooncake, rotor_trace
from rotor.bench.workload import Conversation


@dataclass(frozen=True)
class TraceOptions:
    """What a reader may need besides the file."""

    block_size: int = 512  # tokens per hash id (Mooncake); per piece of text (rotor, no hashes)


class Trace(Protocol):
    """A parsed trace: the requests' timestamps (ms, in send order) and the
    requests themselves, made lazily (a long trace's prompts would not fit in
    memory at once)."""

    @property
    def timestamps_ms(self) -> Sequence[float]: ...

    @property
    def in_tokens(self) -> bool:
        """Its lengths are tokens: the server's tokens per word is needed."""
        ...

    def conversations(self, tokens_per_word: float | None, seed: str) -> Iterator[Conversation]:
        """The requests in send order; `seed` makes their text (a level's own)."""
        ...


Reader = Callable[[Path, TraceOptions], Trace]

FORMATS: dict[str, Reader] = {"mooncake": mooncake.read, "rotor": rotor_trace.read}


def read(path: Path, fmt: str, options: TraceOptions) -> Trace:
    """The trace in `path`; ValueError naming the file (and line) when it is not one."""
    if fmt not in FORMATS:
        raise ValueError(f"--trace-format {fmt!r}: one of {', '.join(FORMATS)}")
    return FORMATS[fmt](path, options)


def send_offsets(timestamps_ms: Sequence[float], speedup: float) -> list[float]:
    """Seconds from the replay's start at which each request is sent: the
    trace's own gaps divided by `speedup`, the first request at 0."""
    if not speedup > 0:
        raise ValueError(f"--trace-speedup must be positive, got {speedup}")
    if not timestamps_ms:
        return []
    t0 = timestamps_ms[0]
    return [(t - t0) / 1000.0 / speedup for t in timestamps_ms]
