"""The preparer: where prompts are prepared (template rendering,
tokenization), in a few threads, with a time budget per job.

A chat template is untrusted code, and an endless loop in it on the loop
thread would stop the server answering anything (`/live` included). Jobs
run in a few threads (short ones may run on the loop under a CPU
alarm first: `inline.py`); a job still
running when its budget is spent is interrupted — an exception is raised in
its thread at the next bytecode it runs (`PyThreadState_SetAsyncExc`) — so a
hostile template holds a thread for at most the budget and the threads cannot
be exhausted for good. A job the caller stops waiting for (the client left) is
interrupted the same way. Long C calls are not interruptible, so those the
threads make are bounded before the job starts (the prompt size check) or
release the GIL (tokenization uses `encode_batch_fast`).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from rotor.pipeline.errors import RequestError
from rotor.pipeline.inline import InlineRunner
from rotor.pipeline.jobs import BudgetExceeded, Job

T = TypeVar("T")

DEFAULT_BUDGET_S = 5.0  # --template-timeout
DEFAULT_THREADS = 4


class Preparer:
    """`run(fn, ...)` in a thread, within `budget_s` of the job's start (time
    spent waiting for a free thread does not count: admission bounds that)."""

    def __init__(self, threads: int = DEFAULT_THREADS, budget_s: float = DEFAULT_BUDGET_S) -> None:
        if budget_s <= 0:
            raise ValueError(f"the template time budget must be positive, got {budget_s}")
        self.budget_s = budget_s
        self.timeouts = 0
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="rotor-prepare")
        self.inline = InlineRunner()

    async def run(
        self, fn: Callable[..., T], *args: Any, inline: str | None = None, **kwargs: Any
    ) -> T:
        """`inline`: a key (the model's name) under which this short job may run
        on the loop first (`InlineRunner`); interrupted there, it runs here."""
        if inline is not None and self.inline.allows(inline):
            try:
                return self.inline.call(inline, functools.partial(fn, *args, **kwargs))
            except BudgetExceeded:
                pass
        job = Job(fn, args, kwargs)
        future = asyncio.get_running_loop().run_in_executor(self._executor, job)
        future.add_done_callback(_retrieve)  # an abandoned job's error is nobody's
        try:
            while True:
                started = job.started
                wait = (
                    self.budget_s if started is None else started + self.budget_s - time.monotonic()
                )
                done, _ = await asyncio.wait({future}, timeout=max(wait, 0))
                if done:
                    break
                if job.started is not None and time.monotonic() >= job.started + self.budget_s:
                    job.abandon()
                    self.timeouts += 1
                    raise RequestError(
                        f"preparing the prompt (chat template and tokenization) took longer "
                        f"than the server's budget of {self.budget_s:g} s",
                        "messages",
                    )
        except BaseException:
            job.abandon()
            raise
        try:
            return future.result()
        except BudgetExceeded:  # interrupted on the way out after all
            raise RequestError(
                f"preparing the prompt took longer than the server's budget of {self.budget_s:g} s",
                "messages",
            ) from None


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
