"""Waiting on an observable state, never a sleep that hopes: `wait_for` polls
a check until it holds (from a test's thread), `wait_for_async` is its twin for
code on an event loop (it yields to the loop between checks; `pause=0` checks
at every turn of the loop, for a state that passes if the loop runs on). Both
fail with `what` once `timeout` seconds have gone by: a guard against a hang,
not an expected duration. A check may raise to fail at once (a process that
exited)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator


def _misses(
    what: str, check: Callable[[], bool], timeout: float, detail: Callable[[], str] | None
) -> Iterator[None]:
    """One item each time `check` does not hold yet; the timeout's error past it."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            message = f"timed out waiting for {what}"
            raise AssertionError(message + (f":\n{detail()}" if detail is not None else ""))
        yield


def wait_for(
    what: str,
    check: Callable[[], bool],
    timeout: float = 30,
    detail: Callable[[], str] | None = None,
) -> None:
    """Poll `check` until it holds; `detail()` (a log) ends the message of a timeout."""
    for _ in _misses(what, check, timeout, detail):
        time.sleep(0.05)


async def wait_for_async(
    what: str,
    check: Callable[[], bool],
    timeout: float = 30,
    detail: Callable[[], str] | None = None,
    pause: float = 0.01,
) -> None:
    """`wait_for` on an event loop: the loop runs other tasks for `pause`
    seconds between checks (0: one turn of the loop)."""
    for _ in _misses(what, check, timeout, detail):
        await asyncio.sleep(pause)
