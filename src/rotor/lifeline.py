"""A child process that dies with its parent, however the parent dies
(SIGKILL included): Linux's PR_SET_PDEATHSIG, set in the child. Used by the
HTTP processes of `--http-workers` and by `rotor nats`'s nats-server, so a
killed parent leaves nothing behind holding its port."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """In a child of `parent`: receive `sig` when the parent dies. A parent
    that died before this took hold makes the child exit now."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        os._exit(1)
