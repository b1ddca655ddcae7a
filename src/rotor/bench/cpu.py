"""Server CPU time from /proc, for CPU per output token (--server-pid)."""

from __future__ import annotations

import os

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces and ')'
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def total_cpu_seconds(pids: list[int]) -> float:
    return sum(cpu_seconds(p) for p in pids)


def check_pids(pids: list[int]) -> None:
    """A clear error before the run, not a traceback after it."""
    for pid in pids:
        try:
            cpu_seconds(pid)
        except OSError:
            raise ValueError(
                f"--server-pid {pid}: no such process (or /proc is unreadable)"
            ) from None
