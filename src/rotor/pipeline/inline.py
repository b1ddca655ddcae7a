"""Short preparations run on the event loop itself, under a CPU budget.

Handing a prompt to the preparer's threads costs a thread hop each way and, with the
GIL, the job runs no faster there. At one stream the two hops cost more than
rendering and tokenizing a short prompt (0.4 ms more than the same job
called directly, measured with benchmarks/dynamo_compare.py). So a short job runs inline, on
the loop's thread, with a CPU-time alarm set (`setitimer(ITIMER_PROF)`): a job
that spends more than `budget_s` (a template that loops) gets `BudgetExceeded`
raised where it runs, and the caller hands it to the threads, where it has the
whole template budget. A few such strikes against one key (a model's
template) and that key is never run inline again, so a hostile template costs
the loop at most `strikes × budget_s`, once.

Why a signal and not a watchdog thread: a thread that checks the clock needs
the GIL to do it, and every hand-over of the GIL between two threads costs a
wake-up of each — measured, that cost more latency than the hop it replaced.
The alarm costs two system calls per job and nothing while nobody runs over.
It counts the process's CPU time (every thread's), so it can only fire early,
never late; Python runs signal handlers on the main thread, so jobs run inline
only there, and only while nobody else (a sampling profiler) owns SIGPROF.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from rotor.pipeline.jobs import BudgetExceeded

T = TypeVar("T")

log = logging.getLogger("rotor.pipeline")

INLINE_BUDGET_S = 0.05  # CPU seconds a job may spend on the loop
INLINE_STRIKES = 3  # interrupted jobs after which a key goes to the threads for good


class _Alarm:
    """The process's one CPU-time alarm and whether a job is inside its window
    (the handler raises only then: an alarm that lands after the job is ignored)."""

    running = False

    @classmethod
    def on_alarm(cls, signum: int, frame: Any) -> None:
        if cls.running:
            cls.running = False
            raise BudgetExceeded

    @classmethod
    def take(cls) -> bool:
        """Own SIGPROF, unless someone else does (a sampling profiler): then no
        job runs inline."""
        current = signal.getsignal(signal.SIGPROF)
        if current == cls.on_alarm:
            return True
        if current not in (signal.SIG_DFL, None):
            return False
        signal.signal(signal.SIGPROF, cls.on_alarm)
        return True


class InlineRunner:
    """`call(key, fn, ...)` on the main thread within `budget_s` of CPU time;
    raises `BudgetExceeded` when stopped (the caller runs it elsewhere).
    `allows(key)`: this thread may run jobs inline and the key has strikes left."""

    def __init__(self, budget_s: float = INLINE_BUDGET_S, strikes: int = INLINE_STRIKES) -> None:
        self.budget_s = budget_s
        self.strikes = strikes
        self.interrupted = 0
        self._struck: dict[str, int] = {}

    def allows(self, key: str) -> bool:
        return (
            threading.current_thread() is threading.main_thread()
            and self._struck.get(key, 0) < self.strikes
            and _Alarm.take()
        )

    def call(self, key: str, fn: Callable[..., T], *args: Any) -> T:
        if not _Alarm.take():  # nothing could stop it here: the caller runs it elsewhere
            raise BudgetExceeded
        _Alarm.running = True
        signal.setitimer(signal.ITIMER_PROF, self.budget_s)
        try:
            return fn(*args)
        except BudgetExceeded:
            self.interrupted += 1
            strikes = self._struck[key] = self._struck.get(key, 0) + 1
            log.warning(
                "preparing a prompt for %r took over %g ms of CPU on the event loop; it "
                "goes on in the preparer's threads%s",
                key,
                1e3 * self.budget_s,
                " (and so will every prompt of this model from now on)"
                if strikes >= self.strikes
                else "",
            )
            raise
        finally:
            # An alarm after this line finds `running` off and does nothing; one
            # just before it raises here, which the caller treats as above.
            _Alarm.running = False
            signal.setitimer(signal.ITIMER_PROF, 0)
