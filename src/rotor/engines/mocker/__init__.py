"""engines/mocker: a simulated vLLM-like engine (scheduler, paged KV cache, scripts)."""

from rotor.engines.mocker.config import MockerConfig
from rotor.engines.mocker.engine import MockerEngine

__all__ = ["MockerConfig", "MockerEngine"]
