"""The live display while a level runs: a bar (requests, or seconds when the
level runs for a duration), in flight, errors, output tokens/s so far.

Only on a terminal; elsewhere (CI, a pipe) one line per level is printed at
its end by the caller, and nothing refreshes.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class Quiet:
    """Progress that shows nothing."""

    def begin(self, label: str, total: int | None, duration: float | None) -> None:
        pass

    def started(self) -> None:
        pass

    def finished(self, record: dict[str, Any]) -> None:
        pass

    def end(self) -> None:
        pass

    def close(self) -> None:
        pass


class Live(Quiet):
    """A rich progress bar per level, refreshed a few times a second."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[done]}"),
            TextColumn("in flight {task.fields[in_flight]:>4}"),
            TextColumn("errors {task.fields[errors]}"),
            TextColumn("{task.fields[tps]} tok/s"),
            TimeElapsedColumn(),
            console=console,
            refresh_per_second=4,
        )
        self._progress.start()
        self._task: Any = None
        self._done = self._in_flight = self._errors = self._tokens = 0
        self._total: int | None = None
        self._duration: float | None = None
        self._t0 = 0.0
        self._last = 0.0

    def begin(self, label: str, total: int | None, duration: float | None) -> None:
        self._done = self._in_flight = self._errors = self._tokens = 0
        self._total, self._duration = total, duration
        self._t0 = time.perf_counter()
        self._task = self._progress.add_task(
            label, total=total or duration or None, done="", in_flight=0, errors=0, tps=0
        )

    def started(self) -> None:
        self._in_flight += 1

    def finished(self, record: dict[str, Any]) -> None:
        self._in_flight -= 1
        self._done += 1
        if record["error"]:
            self._errors += 1
        self._tokens += record["output_tokens"] or 0
        now = time.perf_counter()
        if now - self._last > 0.1:  # rich's own refresh is what draws; keep updates cheap
            self._last = now
            self._push(now)

    def _push(self, now: float) -> None:
        elapsed = max(now - self._t0, 1e-9)
        done = f"{self._done}/{self._total}" if self._total else f"{self._done} requests"
        completed = self._done if self._total else min(elapsed, self._duration or elapsed)
        self._progress.update(
            self._task,
            completed=completed,
            done=done,
            in_flight=self._in_flight,
            errors=self._errors,
            tps=f"{self._tokens / elapsed:,.0f}",
        )

    def end(self) -> None:
        self._push(time.perf_counter())
        if self._duration and not self._total:
            self._progress.update(self._task, completed=self._duration)

    def close(self) -> None:
        self._progress.stop()
