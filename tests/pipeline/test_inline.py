"""Short prepare jobs on the event loop (pipeline/inline.py): they run on the
calling (main) thread, a job past its CPU budget is interrupted and the
preparer's threads take over, a key with too many strikes stays with the threads, and an
interruption never lands outside the job it was meant for."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.pipeline.errors import RequestError
from rotor.pipeline.inline import InlineRunner
from rotor.pipeline.jobs import BudgetExceeded
from rotor.pipeline.preparer import Preparer


def spin_forever() -> None:
    while True:
        pass


def spin_cpu(seconds: float) -> int:
    """Spend about `seconds` of this thread's CPU time, in bytecode."""
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def test_a_short_job_runs_on_the_calling_thread() -> None:
    runner = InlineRunner()
    assert runner.call("m", threading.get_ident) == threading.get_ident()
    assert runner.interrupted == 0


def test_an_endless_job_is_interrupted_and_counts_a_strike() -> None:
    runner = InlineRunner(budget_s=0.02, strikes=2)
    with pytest.raises(BudgetExceeded):
        runner.call("m", spin_forever)
    assert runner.interrupted == 1 and runner.allows("m")
    with pytest.raises(BudgetExceeded):
        runner.call("m", spin_forever)
    assert not runner.allows("m")
    assert runner.allows("other")  # strikes are per key (per model)
    assert runner.call("m", lambda: 7) == 7  # call itself still works; the preparer asks allows()


@settings(max_examples=40, deadline=None)
@given(work_ms=st.floats(min_value=0.0, max_value=3.0))
def test_an_interruption_never_lands_after_its_job(work_ms: float) -> None:
    """Jobs that end right around their budget: each either returns or raises
    inside `call`; nothing is left pending for the code that runs next."""
    runner = InlineRunner(budget_s=0.001)
    for _ in range(10):
        try:
            runner.call("m", spin_cpu, work_ms / 1000)
        except BudgetExceeded:
            pass
        # Bytecode after the call: a stray interruption would be raised here.
        total = 0
        for i in range(2000):
            total += i
        assert total == 1999000


async def test_the_preparer_runs_an_inline_job_on_the_loop_and_takes_over_an_interrupted_one() -> (
    None
):
    preparer = Preparer(budget_s=0.3)
    preparer.inline = InlineRunner(budget_s=0.02, strikes=1)
    loop_thread = threading.get_ident()
    assert await preparer.run(threading.get_ident, inline="m") == loop_thread
    assert await preparer.run(threading.get_ident) != loop_thread  # no key: a thread
    # Endless: interrupted on the loop, then stopped at the preparer's own budget.
    with pytest.raises(RequestError, match="budget of 0.3 s"):
        await preparer.run(spin_forever, inline="m")
    assert preparer.inline.interrupted == 1 and preparer.timeouts == 1
    # One strike was this key's allowance: its jobs now go straight to the threads.
    assert await preparer.run(threading.get_ident, inline="m") != loop_thread
    assert await preparer.run(threading.get_ident, inline="n") == loop_thread


async def test_the_loop_keeps_running_other_tasks_once_an_inline_job_is_stopped() -> None:
    preparer = Preparer(budget_s=0.2)
    preparer.inline = InlineRunner(budget_s=0.02, strikes=1)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    with pytest.raises(RequestError):
        await preparer.run(spin_forever, inline="m")
    task.cancel()
    # Stopped on the loop, the template went on in a worker: the loop served
    # the ticker while the preparer spent its budget (run on the loop, it would not).
    assert ticks > before


def test_jobs_run_inline_only_on_the_main_thread() -> None:
    """Python runs signal handlers on the main thread only: elsewhere the
    alarm could not stop a job, so nothing runs inline there."""
    runner = InlineRunner()
    assert runner.allows("m")
    seen: list[bool] = []
    thread = threading.Thread(target=lambda: seen.append(runner.allows("m")))
    thread.start()
    thread.join()
    assert seen == [False]


def test_an_alarm_after_the_job_is_ignored() -> None:
    """The alarm is disarmed when the job ends; one that fires later anyway
    (raised by hand here) finds no job running and does nothing."""
    runner = InlineRunner(budget_s=0.02)
    assert runner.call("m", lambda: 1) == 1
    signal.raise_signal(signal.SIGPROF)
    total = sum(range(1000))  # bytecode after the signal: nothing is raised here
    assert total == 499500


def test_a_sigprof_handler_of_someone_else_is_left_alone() -> None:
    """A sampling profiler that owns SIGPROF keeps it: jobs then go to the threads."""

    def profiler(signum: int, frame: object) -> None:
        pass

    before = signal.signal(signal.SIGPROF, profiler)
    try:
        assert not InlineRunner().allows("m")
        assert signal.getsignal(signal.SIGPROF) is profiler
    finally:
        signal.signal(signal.SIGPROF, before)
    assert InlineRunner().allows("m")  # back to rotor's own (or the default): inline again
