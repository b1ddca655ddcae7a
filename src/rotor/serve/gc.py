"""The garbage collector, set for a server that streams.

A served request's objects are freed by reference counting as soon as it
ends (tests/api/test_request_garbage.py keeps it so); the collector only has
what startup built (modules, schemas, templates, the engine: ~90k objects)
and what caches keep. Left as Python starts it, the collector walks all of
that again and again: under 32 streams a full collection took 50-100 ms,
every stream stalled behind it, and young collections came every few
requests. So once a process has started, what it built is frozen (never
walked again) and young collections wait for more allocations.
"""

from __future__ import annotations

import gc

# Young collections after this many more container allocations than frees
# (Python's default is 700; 3.13 raised it to 2000). Only what caches keep,
# and the occasional cycle an error path makes, grows it.
YOUNG_THRESHOLD = 10_000


def settle() -> None:
    """Called once a process has loaded its models and started its engines."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)


async def settle_after_startup() -> None:
    """`settle`, as the app's last startup hook (after the engines started)."""
    settle()
