"""Every test under tests/e2e starts a real rotor server: mark them all `e2e`
(`pytest -m "not e2e"` runs the rest)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A conftest's hook sees every collected item, not only this directory's.
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)
