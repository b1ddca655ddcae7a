"""The planner's own Prometheus metrics (`rotor_planner_*`), on its
`--system-port`: what it wants, what it has, what it did, and the load it
predicted beside the load it then saw."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from rotor.planner.observation import Observation, PoolName


class PlannerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.target = Gauge(
            "rotor_planner_target_workers", "Workers the planner wants", ["pool"], registry=r
        )
        self.live = Gauge(
            "rotor_planner_live_workers", "Workers serving (their leases say)", ["pool"], registry=r
        )
        self.decisions = Counter(
            "rotor_planner_decisions",
            "Decisions by pool and action (up, down, hold, wait)",
            ["pool", "action"],
            registry=r,
        )
        self.failures = Counter(
            "rotor_planner_worker_failures",
            "Workers that exited without being asked to (local connector)",
            ["pool"],
            registry=r,
        )
        self.timeouts = Counter(
            "rotor_planner_settle_timeouts",
            "Actions whose workers did not register (or leave) within --settle-timeout",
            ["pool"],
            registry=r,
        )
        self.connector_errors = Counter(
            "rotor_planner_connector_errors", "Scale requests the connector refused", registry=r
        )
        self.observed = Gauge(
            "rotor_planner_observed",
            "The last interval: requests_per_second, isl, osl (tokens), ttft_p90, itl_p90 (s)",
            ["quantity"],
            registry=r,
        )
        self.predicted = Gauge(
            "rotor_planner_predicted",
            "Throughput mode: the next interval's requests_per_second, isl, osl",
            ["quantity"],
            registry=r,
        )

    def saw(self, obs: Observation, pools: tuple[PoolName, ...]) -> None:
        t = obs.traffic
        self.observed.labels("requests_per_second").set(t.rate)
        self.observed.labels("isl").set(t.isl)
        self.observed.labels("osl").set(t.osl)
        self.observed.labels("ttft_p90").set(t.ttft(0.9) or 0.0)
        self.observed.labels("itl_p90").set(t.tpot(0.9) or 0.0)
        for pool in pools:
            self.live.labels(pool).set(obs.live(pool))

    def render(self) -> bytes:
        return generate_latest(self.registry)
