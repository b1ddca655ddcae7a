"""How an engine's state reaches /metrics: every EngineState field exactly
once, what only grows as a counter, in Prometheus's base units."""

from __future__ import annotations

import dataclasses

from prometheus_client.parser import text_string_to_metric_families

from rotor.api.metrics import Metrics
from rotor.protocol.engine import EngineState


def exported(state: EngineState) -> dict[str, tuple[str, float]]:
    text = Metrics(lambda: [("m", state)]).render().decode()
    return {
        f.name: (f.type, s.value)
        for f in text_string_to_metric_families(text)
        if f.name.startswith("rotor_engine_")
        for s in f.samples
        if s.name.endswith(("_total", f.name)) and s.labels == {"model": "m"}
    }


def test_every_field_is_exported_once_in_base_units() -> None:
    fields = [f.name for f in dataclasses.fields(EngineState)]
    state = EngineState(**{name: i + 1 for i, name in enumerate(fields)})
    found = exported(state)
    assert len(found) == len(fields)
    assert found["rotor_engine_waiting"] == ("gauge", state.waiting)
    assert found["rotor_engine_kv_blocks_capacity"] == ("gauge", state.kv_blocks_total)
    assert found["rotor_engine_generated_tokens"] == ("counter", state.tokens_generated)
    assert found["rotor_engine_steps"] == ("counter", state.steps)
    assert found["rotor_engine_simulated_seconds"] == ("counter", state.simulated_ms / 1000)
    assert found["rotor_engine_kv_fetched_blocks"] == ("counter", state.kv_blocks_fetched)
    values = sorted(round(v * (1000 if "simulated" in n else 1)) for n, (_, v) in found.items())
    assert values == sorted(range(1, len(fields) + 1))  # no field missing, none twice
