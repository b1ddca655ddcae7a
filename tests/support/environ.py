"""The ROTOR_* environment as a test sets it: rotor's parser reads every flag
from ROTOR_<FLAG>, so a check of what a command line means must not see the
variables of the shell that runs the tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def rotor_env(env: dict[str, str]) -> Iterator[None]:
    """Only these ROTOR_* variables set, for the length of the block."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("ROTOR_")}
    os.environ.update(env)
    try:
        yield
    finally:
        for key in env:
            os.environ.pop(key, None)
        os.environ.update(saved)
