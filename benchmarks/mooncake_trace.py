"""A synthetic trace in Mooncake's format, built here (nothing is downloaded):
what `rotor bench --trace FILE --trace-format mooncake` replays.

    python benchmarks/mooncake_trace.py trace.jsonl --requests 200 --rate 2

Like Mooncake's published traces it has long prompts that share prefixes:
every request starts with one of a few system prompts (Zipf-popular, a few
blocks each), some are the next turn of an earlier request (its hash ids and
then new ones: a conversation's growing prompt), and the rest of each prompt
is blocks of its own. Arrivals are Poisson at `--rate`; a `--long-share` of
the prompts are long (`--long`, tokens), the rest short (`--short`). One
seed gives the same file.
"""

from __future__ import annotations

import argparse
import math
import random
from itertools import count
from pathlib import Path
from typing import Any

import orjson


def _range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(":")
    return int(lo), int(hi or lo)


def generate(
    requests: int = 200,
    rate: float = 2.0,
    long_share: float = 0.3,
    long: tuple[int, int] = (8000, 16000),
    short: tuple[int, int] = (100, 1000),
    output: tuple[int, int] = (64, 256),
    prefixes: int = 4,
    prefix_blocks: tuple[int, int] = (1, 4),
    follow_up: float = 0.2,
    block_size: int = 512,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The trace's rows, in time order."""
    rng = random.Random(seed)
    ids = count()
    systems = [[next(ids) for _ in range(rng.randint(*prefix_blocks))] for _ in range(prefixes)]
    popularity = [1 / (k + 1) for k in range(prefixes)]  # Zipf: the first is the most used
    rows: list[dict[str, Any]] = []
    t = 0.0
    for _ in range(requests):
        n_in = rng.randint(*(long if rng.random() < long_share else short))
        blocks = math.ceil(n_in / block_size)
        earlier = [r for r in rows[-50:] if len(r["hash_ids"]) < blocks]
        if earlier and rng.random() < follow_up:  # the next turn: the earlier prompt, then more
            head = list(rng.choice(earlier)["hash_ids"])
        else:
            head = list(rng.choices(systems, popularity)[0]) if systems else []
        head = head[: blocks - 1]  # at least one block of its own
        hash_ids = head + [next(ids) for _ in range(blocks - len(head))]
        rows.append(
            {
                "timestamp": round(t * 1000),
                "input_length": n_in,
                "output_length": rng.randint(*output),
                "hash_ids": hash_ids,
            }
        )
        t += rng.expovariate(rate)
    return rows


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--rate", type=float, default=2.0, help="requests/s (Poisson)")
    p.add_argument("--long-share", type=float, default=0.3)
    p.add_argument("--long", type=_range, default=(8000, 16000), metavar="MIN:MAX")
    p.add_argument("--short", type=_range, default=(100, 1000), metavar="MIN:MAX")
    p.add_argument("--output", type=_range, default=(64, 256), metavar="MIN:MAX")
    p.add_argument("--prefixes", type=int, default=4, help="system prompts")
    p.add_argument("--follow-up", type=float, default=0.2, help="share of next turns")
    p.add_argument("--block-size", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rows = generate(
        a.requests,
        a.rate,
        a.long_share,
        a.long,
        a.short,
        a.output,
        a.prefixes,
        follow_up=a.follow_up,
        block_size=a.block_size,
        seed=a.seed,
    )
    write(a.path, rows)
    print(f"{a.path}: {len(rows)} requests over {rows[-1]['timestamp'] / 1000:.1f} s")


if __name__ == "__main__":
    main()
