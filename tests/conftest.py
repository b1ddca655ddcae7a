"""What every test runs under, whichever folder it is in.

The suite never writes to the home of whoever runs it: `rotor run` keeps
stored responses in a SQLite file under the XDG state folder by default
(serve/response_store.py), so XDG_STATE_HOME points into a temporary folder
of this session's, for the tests and every rotor process they start (they
inherit the environment).

Under `pytest -n N` each test module runs on one worker, and every tests/vllm
module on the same one (support/scheduling.py says why)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from xdist.remote import Producer

from support.scheduling import ModuleScheduling, longest_first

_STATE = tempfile.mkdtemp(prefix="rotor-test-state-")


def pytest_configure(config: pytest.Config) -> None:
    os.environ["XDG_STATE_HOME"] = _STATE


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_STATE, ignore_errors=True)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> ModuleScheduling | None:
    """pyproject's `--dist loadscope`, as support/scheduling.py groups it; another
    `--dist` given on the command line is pytest-xdist's own."""
    return ModuleScheduling(config, log) if config.getvalue("dist") == "loadscope" else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    longest_first(items)
