"""Prometheus metrics (prefix `rotor_`), one registry per app."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from rotor.api.admission import Admission
from rotor.api.answers import Answers
from rotor.api.histogram import FastHistogram
from rotor.frontend import RemoteEngine
from rotor.pipeline.images import ImageCounts
from rotor.protocol.engine import EngineState

# How each EngineState field is exported: a gauge of what the engine holds
# now, or a counter (exposed as `<name>_total`) of what only grows, in
# Prometheus's base units. Every field has one entry (a test checks).
_ENGINE_COUNTERS = {  # field: (metric name, scale to base units)
    "tokens_generated": ("rotor_engine_generated_tokens", 1.0),
    "preemptions": ("rotor_engine_preemptions", 1.0),
    "steps": ("rotor_engine_steps", 1.0),
    "simulated_ms": ("rotor_engine_simulated_seconds", 0.001),
    "kv_hold_timeouts": ("rotor_engine_kv_hold_timeouts", 1.0),
    "kv_blocks_fetched": ("rotor_engine_kv_fetched_blocks", 1.0),
    "kv_fetch_failures": ("rotor_engine_kv_fetch_failures", 1.0),
    "kv_host_blocks_loaded": ("rotor_engine_kv_host_loaded_blocks", 1.0),
    "kv_disk_blocks_loaded": ("rotor_engine_kv_disk_loaded_blocks", 1.0),
}
_ENGINE_GAUGE_NAMES = {"kv_blocks_total": "rotor_engine_kv_blocks_capacity"}
_ENGINE_GAUGES = [
    (f.name, _ENGINE_GAUGE_NAMES.get(f.name, f"rotor_engine_{f.name}"))
    for f in dataclasses.fields(EngineState)
    if f.name not in _ENGINE_COUNTERS
]


def _engine_doc(field: str) -> str:
    return f"engine state: {field.replace('_', ' ')}"


# Buckets fit for LLM latencies: from a fast TTFT to a long generation.
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"  # /metrics's content type
_TTFT = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_ITL = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
_DURATION = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


EngineStates = Callable[[], list[tuple[str, EngineState]]]


class _EngineCollector:
    """Every served model's engine state, read at scrape time (`model` label)."""

    def __init__(self, states: EngineStates) -> None:
        self._states = states

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        states = self._states()
        for field, name in _ENGINE_GAUGES:
            gauge = GaugeMetricFamily(name, _engine_doc(field), labels=["model"])
            for model, state in states:
                gauge.add_metric([model], getattr(state, field))
            yield gauge
        for field, (name, scale) in _ENGINE_COUNTERS.items():
            counter = CounterMetricFamily(name, _engine_doc(field), labels=["model"])
            for model, state in states:
                counter.add_metric([model], getattr(state, field) * scale)
            yield counter


Pools = Callable[[], list[tuple[str, RemoteEngine]]]


class _RouterCollector:
    """Routing decisions, migrations and refusals per model, and each live
    worker's load, read at scrape time from the pools."""

    def __init__(self, pools: Pools) -> None:
        self._pools = pools

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        decisions = CounterMetricFamily(
            "rotor_router_decisions", "Requests routed, by worker", labels=["model", "worker"]
        )
        migrations = CounterMetricFamily(
            "rotor_router_migrations", "Requests moved to another worker", labels=["model", "cause"]
        )
        no_worker = CounterMetricFamily(
            "rotor_router_no_worker", "Requests refused: no live worker", labels=["model"]
        )
        overloaded = CounterMetricFamily(
            "rotor_router_overloaded",
            "Requests refused: every live worker past --max-kv-usage or --max-prefill-tokens",
            labels=["model"],
        )
        workers = GaugeMetricFamily("rotor_router_live_workers", "Live workers", labels=["model"])
        unhealthy = GaugeMetricFamily(
            "rotor_router_unhealthy_workers",
            "Serving workers not routed to: their engine failed its canary",
            labels=["model"],
        )
        active = GaugeMetricFamily(
            "rotor_worker_active_requests", "Requests a worker holds", labels=["model", "worker"]
        )
        blocks = GaugeMetricFamily(
            "rotor_worker_kv_blocks_used", "KV blocks a worker uses", labels=["model", "worker"]
        )
        kv_prompt = CounterMetricFamily(
            "rotor_router_kv_prompt_blocks",
            "kv router: prompt blocks routed, by worker",
            labels=["model", "worker"],
        )
        kv_overlap = CounterMetricFamily(
            "rotor_router_kv_overlap_blocks",
            "kv router: prompt blocks the chosen worker already held",
            labels=["model", "worker"],
        )
        kv_hits = CounterMetricFamily(
            "rotor_router_kv_hits",
            "kv router: requests routed to a worker holding part of their prefix",
            labels=["model", "worker"],
        )
        kv_tiers = CounterMetricFamily(
            "rotor_router_kv_tier_blocks",
            "kv router: the chosen worker's overlap blocks by where each sat "
            "(device, host, disk, or predicted: sent there, its KV events not yet come)",
            labels=["model", "worker", "medium"],
        )
        disagg = CounterMetricFamily(
            "rotor_disagg_prefill",
            "Prefill decisions of models with prefill workers: where (remote, local, "
            "refused) and why",
            labels=["model", "where", "reason"],
        )
        sessions = CounterMetricFamily(
            "rotor_router_session_routes",
            "Turns that named a session (x-rotor-session-id): kept on their pinned worker "
            "(pinned), with no pin yet (new), or moved (moved_gone, moved_overloaded)",
            labels=["model", "outcome"],
        )
        handover = HistogramMetricFamily(
            "rotor_disagg_handover_seconds",
            "From a prefill worker's answer to the decode worker's first token",
            labels=["model"],
        )
        for model, pool in self._pools():
            stats, live = pool.stats, pool.describe()
            for (where, reason), count in stats.disagg.items():
                disagg.add_metric([model, where, reason], count)
            if stats.handover.count:
                handover.add_metric(
                    [model], stats.handover.cumulative(), sum_value=stats.handover.total
                )
            kv = pool.kv_stats()
            if kv is not None:
                for worker, count in kv.prompt_blocks.items():
                    kv_prompt.add_metric([model, worker], count)
                for worker, count in kv.overlap_blocks.items():
                    kv_overlap.add_metric([model, worker], count)
                for worker, count in kv.hits.items():
                    kv_hits.add_metric([model, worker], count)
                for (worker, medium), count in kv.tier_blocks.items():
                    kv_tiers.add_metric([model, worker, medium], count)
            for worker, count in stats.decisions.items():
                decisions.add_metric([model, worker], count)
            for cause, count in stats.migrations.items():
                migrations.add_metric([model, cause], count)
            for outcome, count in stats.sessions.items():
                sessions.add_metric([model, outcome], count)
            no_worker.add_metric([model], stats.no_worker)
            overloaded.add_metric([model], stats.overloaded)
            workers.add_metric([model], len(live))
            unhealthy.add_metric([model], len(pool.unhealthy()))
            for w in live:
                active.add_metric([model, w["id"]], w["active_requests"])
                blocks.add_metric([model, w["id"]], w["kv_blocks_used"])
        yield from (decisions, migrations, no_worker, overloaded, workers, unhealthy)
        yield from (active, blocks)
        yield from (kv_prompt, kv_overlap, kv_hits, kv_tiers, disagg, handover, sessions)


class _AdmissionCollector:
    """The admission queue and the line behind it, read at scrape time."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        a = self._admission
        yield GaugeMetricFamily(
            "rotor_queued_requests", "Requests waiting for their first token", value=a.depth
        )
        yield GaugeMetricFamily(
            "rotor_max_queued_requests", "The admission limit (--max-queued-requests)", a.limit
        )
        yield GaugeMetricFamily(
            "rotor_waiting_requests", "Requests waiting in line for an admission place", a.waiting
        )
        yield GaugeMetricFamily(
            "rotor_max_waiting_requests",
            "The admission line's limit (--max-waiting-requests)",
            a.waiting_limit,
        )
        yield CounterMetricFamily(
            "rotor_requests_refused_overloaded",
            "Requests refused with 503: queue and line full (or displaced from the line)",
            a.refused,
        )


class _MediaCollector:
    """What loading requests' images did (pipeline/images.ImageCounts), read at scrape time."""

    def __init__(self, counts: Callable[[], ImageCounts]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        c = self._counts()
        loaded = CounterMetricFamily(
            "rotor_media_images", "Images loaded, by source (data, http, file)", labels=["source"]
        )
        size = CounterMetricFamily(
            "rotor_media_bytes", "Bytes of the images loaded, by source", labels=["source"]
        )
        failed = CounterMetricFamily(
            "rotor_media_failures",
            "Image parts refused (a 400), by reason (timeout, too_large, refused_address, ...)",
            labels=["reason"],
        )
        for source, n in sorted(c.loaded.items()):
            loaded.add_metric([source], n)
            size.add_metric([source], c.bytes[source])
        for reason, n in sorted(c.failures.items()):
            failed.add_metric([reason], n)
        seconds = HistogramMetricFamily(
            "rotor_media_load_seconds", "One image fetched (or read) and decoded"
        )
        seconds.add_metric([], c.seconds.cumulative(), c.seconds.total)
        yield from (loaded, size, failed, seconds)


@dataclasses.dataclass(frozen=True, slots=True)
class ModelSeries:
    """One model's children of the per-response metrics. Looking a child up
    (`labels(...)`) takes a lock and builds a key each time: a response
    looks them up once, here, not per event."""

    in_flight: Any
    ttft: Any
    itl: Any
    duration: Any
    prompt_tokens: Any
    completion_tokens: Any


class Metrics:
    def __init__(
        self,
        engine_states: EngineStates | None = None,
        pools: Pools | None = None,
        admission: Admission | None = None,
        answers: Answers | None = None,
        images: Callable[[], ImageCounts] | None = None,
    ) -> None:
        self.answers = answers  # per-response figures for the planner (rotor frontend only)
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "rotor_requests",
            "Requests by outcome",
            ["model", "endpoint", "stream", "status"],
            registry=r,
        )
        self.in_flight = Gauge(
            "rotor_requests_in_flight", "Requests running", ["model"], registry=r
        )
        # Observed per response, and per event (the gap): rotor's own histogram,
        # which costs no lock (api/histogram.py)
        self.ttft = FastHistogram(
            "rotor_time_to_first_token_seconds", "Time to first token", ["model"], _TTFT, r
        )
        self.itl = FastHistogram(
            "rotor_inter_token_latency_seconds", "Time between chunks", ["model"], _ITL, r
        )
        self.duration = FastHistogram(
            "rotor_request_duration_seconds", "Whole request", ["model"], _DURATION, r
        )
        self.prompt_tokens = Counter("rotor_prompt_tokens", "Prompt tokens", ["model"], registry=r)
        self.completion_tokens = Counter(
            "rotor_completion_tokens", "Completion tokens", ["model"], registry=r
        )
        self.disconnected = Counter(
            "rotor_disconnected_clients", "Clients that left mid-request", ["model"], registry=r
        )
        self.body_aborted = Counter(
            "rotor_body_aborted",
            "Clients that disconnected while sending their request body",
            registry=r,
        )
        self._series: dict[str, ModelSeries] = {}
        self._outcomes: dict[tuple[str, str, str, str], Any] = {}
        if engine_states is not None:
            r.register(_EngineCollector(engine_states))
        if pools is not None:
            r.register(_RouterCollector(pools))
        if admission is not None:
            r.register(_AdmissionCollector(admission))
        if images is not None:
            r.register(_MediaCollector(images))

    def series(self, model: str) -> ModelSeries:
        """The model's children (served model names only: a bounded set)."""
        found = self._series.get(model)
        if found is None:
            found = self._series[model] = ModelSeries(
                self.in_flight.labels(model),
                self.ttft.labels(model),
                self.itl.labels(model),
                self.duration.labels(model),
                self.prompt_tokens.labels(model),
                self.completion_tokens.labels(model),
            )
        return found

    def outcome(self, model: str, endpoint: str, stream: str, status: str) -> Any:
        """The `rotor_requests` child for one outcome."""
        key = (model, endpoint, stream, status)
        found = self._outcomes.get(key)
        if found is None:
            found = self._outcomes[key] = self.requests.labels(*key)
        return found

    def render(self) -> bytes:
        return generate_latest(self.registry)
