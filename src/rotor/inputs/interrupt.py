"""Ctrl-C in the terminal inputs: it stops the work at hand, cleanly.

asyncio's own SIGINT handling would raise KeyboardInterrupt wherever the loop
happens to be; a handler of our own cancels just the running work instead, so
its chunk stream is closed (which stops the engine) and the input decides
what comes next: back to the prompt, or exit with EXIT_INTERRUPTED.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

# The shell's exit status for a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130

T = TypeVar("T")


class Interrupted(Exception):
    """Ctrl-C cancelled the work."""


async def until_interrupted(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` as a task that Ctrl-C (SIGINT) cancels; Interrupted when it did.

    The work's own exceptions pass through, and cancelling the caller cancels
    the work as usual."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        return await task
    except asyncio.CancelledError:
        if not (interrupted and task.cancelled()):
            raise
        raise Interrupted from None
    finally:
        loop.remove_signal_handler(signal.SIGINT)
