"""Tracing's switch and its cost when off (rotor/tracing): where spans go,
from the flag or the standard OTEL_* variables, and that off every call is
the shared no-op span and no layer is put over an engine's stream."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest

from rotor import tracing
from rotor.protocol.engine import EngineOutput, EngineRequest, EngineState
from rotor.protocol.flow import Pump
from rotor.tracing.generate import follow, traced


@pytest.mark.parametrize(
    ("flag", "env", "url"),
    [
        (None, {}, None),  # the default: off
        ("http://c:4318", {}, "http://c:4318/v1/traces"),
        ("http://c:4318/", {}, "http://c:4318/v1/traces"),
        ("http://c:4318/v1/traces", {}, "http://c:4318/v1/traces"),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://e:4318"}, "http://e:4318/v1/traces"),
        (None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"}, "http://t:1/x"),
        (
            None,
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://e:1",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x",
            },
            "http://t:1/x",
        ),
        ("http://c:1", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://e:1"}, "http://c:1/v1/traces"),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, None),
        ("http://c:1", {"OTEL_SDK_DISABLED": "true"}, None),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://e:1", "OTEL_TRACES_EXPORTER": "none"}, None),
    ],
)
def test_where_spans_go(flag: str | None, env: dict[str, str], url: str | None) -> None:
    assert tracing.traces_url(flag, env) == url


def test_off_every_span_is_the_no_op_one() -> None:
    assert not tracing.enabled()
    span = tracing.start("rotor.route", {"rotor.worker_id": "w"})
    assert span is tracing.NO_SPAN and not span.recording
    assert tracing.remote("x", {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}) is span
    assert span.headers() is None  # nothing more crosses NATS
    assert tracing.use(span) is None and tracing.current() is tracing.NO_SPAN


def test_off_an_engine_stream_gets_no_layer() -> None:
    """The per-token path, tracing off: the engine's own stream, the engine itself."""

    async def outputs() -> AsyncIterator[EngineOutput]:
        yield EngineOutput(token_ids=[1], finish="eos")

    class Engine:
        def generate(self, request: EngineRequest) -> Pump[EngineOutput]:
            return Pump(outputs())

        def state(self) -> EngineState:
            return EngineState()

    engine = Engine()
    stream = engine.generate(EngineRequest("r", "m", [1]))
    assert follow(tracing.NO_SPAN, stream) is stream
    assert traced(engine) is engine


def test_off_opentelemetry_is_not_imported_by_importing_rotor() -> None:
    """Everything a serving process imports, in a fresh interpreter: none of
    OpenTelemetry's SDK or exporters (rotor's tracing loads them), nor
    rotor's own tracing backend (tests/e2e/test_tracing.py watches a real
    server too). OpenTelemetry's API package may be among them: FastAPI
    0.165 and later import it themselves."""
    import subprocess

    code = (
        "import sys, rotor.cli, rotor.serve.run, rotor.serve.frontend, rotor.serve.worker, "
        "rotor.api.app, rotor.tracing.generate; "
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['opentelemetry', 'sdk'], ['opentelemetry', 'exporter']) or m == 'rotor.tracing.otel'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
