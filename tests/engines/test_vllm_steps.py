"""vLLM's steps as a worker's canary reads them (engines/vllm/engine.py):
rotor's stat logger counts each record vLLM's output handler makes — one per
batch of the engine core's outputs, which only a step makes — into
`EngineState.steps`, beside the scheduler's gauges. (vLLM imported only;
no engine started.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")

from rotor.engines.vllm.engine import _Scheduler, _stat_logger_factory  # noqa: E402


def test_each_record_of_the_engine_core_is_a_step() -> None:
    into = _Scheduler()
    logger = _stat_logger_factory(into)(None, 0)
    stats = SimpleNamespace(num_running_reqs=3, num_waiting_reqs=1, kv_cache_usage=0.25)
    logger.record(scheduler_stats=stats, iteration_stats=object())
    logger.record(scheduler_stats=None, iteration_stats=None)
    assert (into.steps, into.running, into.waiting, into.kv_usage) == (2, 3, 1, 0.25)
