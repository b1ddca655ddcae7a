"""One prepare job that another thread can interrupt: the state machine that
makes an interruption land in this job and never in whatever the prepare
preparer's thread runs next."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class BudgetExceeded(BaseException):
    """Raised inside a thread whose job ran past its budget. A BaseException,
    so the template sandbox's `except Exception` cannot swallow it."""


def _raise_in(ident: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), ctypes.py_object(exc) if exc is not None else None
    )


class Job(Generic[T]):
    """One call, and the state that decides whether it may still be interrupted."""

    __slots__ = ("fn", "args", "kwargs", "lock", "state", "ident", "started")

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.lock = threading.Lock()
        self.state = "queued"  # queued → running → done, or → abandoned
        self.ident = 0
        self.started: float | None = None

    def __call__(self) -> T:
        with self.lock:
            if self.state == "abandoned":
                raise BudgetExceeded
            self.state, self.ident, self.started = (
                "running",
                threading.get_ident(),
                time.monotonic(),
            )
        try:
            return self.fn(*self.args, **self.kwargs)
        finally:
            with self.lock:
                interrupted = self.state == "abandoned"
                self.state = "done"
            if interrupted:  # not delivered yet: it must not hit the thread's next job
                _raise_in(self.ident, None)

    def abandon(self) -> None:
        """Stop the job: not started, it never runs; running, it is interrupted."""
        with self.lock:
            if self.state == "running":
                _raise_in(self.ident, BudgetExceeded)
            if self.state in ("queued", "running"):
                self.state = "abandoned"
