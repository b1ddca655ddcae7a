"""KV blocks as events and snapshots name them (`rotor.protocol.kv`): runs of
one chain each for `BlocksStored`, and (hash, parent) pairs with parents
first for a `KVSnapshot`. The mocker's cache and vLLM's relay both use them,
for every medium."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

Pair = tuple[int, int | None]  # a block's hash and its parent's (None: a first block)


def runs(pairs: Iterable[Pair]) -> list[tuple[list[int], int | None]]:
    """The blocks as few `BlocksStored` runs as their order allows: each run
    a chain (every block the parent of the next) with its first block's
    parent. Pairs given parents first or children first (the order a cache
    evicts them, deepest first) both join into one run."""
    out: list[tuple[list[int], int | None]] = []
    run: deque[int] = deque()
    run_parent: int | None = None
    for h, parent in pairs:
        if run:
            if parent == run[-1]:
                run.append(h)
                continue
            if run_parent == h:
                run.appendleft(h)
                run_parent = parent
                continue
            out.append((list(run), run_parent))
            run = deque()
        run.append(h)
        run_parent = parent
    if run:
        out.append((list(run), run_parent))
    return out


def parents_first(parent_of: Mapping[int, int | None]) -> list[Pair]:
    """Every block as (hash, parent), a parent before its children whenever
    the parent is itself among them (breadth first from the roots: blocks
    whose parent is None or not held)."""
    children: dict[int, list[int]] = {}
    order: list[int] = []
    for h, parent in parent_of.items():
        if parent is not None and parent in parent_of:
            children.setdefault(parent, []).append(h)
        else:
            order.append(h)
    for h in order:  # grows while it runs
        order.extend(children.get(h, ()))
    return [(h, parent_of[h]) for h in order]
