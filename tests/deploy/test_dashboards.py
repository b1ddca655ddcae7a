"""deploy/grafana/rotor.json, deploy/prometheus/alerts.yml and prometheus.yml
against what rotor really exports.

A real nats-server, a prefill and a decode `rotor worker out=mocker
--system-port` and a `rotor frontend` serve real traffic — chat streamed and
not, a completion, an unknown model, a client that leaves mid-answer — and
their `/metrics` (the frontend's port, each worker's `--system-port`) are
scraped. Then every PromQL expression of
the dashboard and of the alert rules is read by a small extractor (metric
names, label matchers, grouping labels, functions) and checked: each metric
is one a rotor process exports (a counter by its exposed `x_total`, a
histogram by `x_bucket` / `x_sum` / `x_count`), each label is one its series
carry (or a target label Prometheus adds), each `job` is a scrape job of
prometheus.yml whose processes export that metric. rotor's own names are
checked against Prometheus's naming conventions (promtool is a Go binary, so
the rules are written down here)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from support.cluster import (
    Frontend,
    Nats,
    Worker,
    nats_server,
    start_frontend,
    start_worker,
    wait_for,
)
from support.prom import (
    AGGREGATIONS,
    FUNCTIONS,
    Family,
    Scrape,
    parse_exposition,
    parse_promql,
    scrape,
)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "rotor.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
FRONTEND_JOB, WORKER_JOB = "rotor-frontend", "rotor-worker"
MODEL = "mock-model"  # the mocker's built-in model
PREFILL = ("out=mocker", "--speedup-ratio", "0", "--disaggregation-mode", "prefill")
# 10 ms per decode step: a long answer lasts long enough to leave it midway
DECODE = ("out=mocker", "--speedup-ratio", "1", "--disaggregation-mode", "decode")


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def prometheus_config() -> dict[str, Any]:
    return yaml.safe_load(PROMETHEUS.read_text())


def panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for panel in dash["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_exprs() -> list[tuple[str, str, str]]:
    """(where, expr, legendFormat) of every target."""
    return [
        (f"panel {p['id']} {p['title']!r} {t['refId']}", t["expr"], t.get("legendFormat", ""))
        for p in panels(dashboard())
        if p["type"] != "row"
        for t in p["targets"]
    ]


def variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard()["templating"]["list"]}


def jobs() -> dict[str, dict[str, Any]]:
    return {job["job_name"]: job for job in prometheus_config()["scrape_configs"]}


def target_labels() -> set[str]:
    """The labels Prometheus adds to every scraped series: job, instance, and
    prometheus.yml's static labels (pool)."""
    static = {
        label
        for job in jobs().values()
        for config in job.get("static_configs", [])
        for label in config.get("labels", {})
    }
    return {"job", "instance"} | static


# Functions whose answer only means something for a series that only grows
RATE_FUNCTIONS = {"rate", "irate", "increase", "resets"}
# Prometheus's own per-target series, which alerts (not the dashboard) may use
PROMETHEUS_SERIES = {"up"}
# Families rotor declares but fills only on an event this test does not cause,
# with the labels their samples would carry (api/metrics.py)
NEEDS_EVENT = {
    "rotor_router_migrations_total": ("a worker that dies mid-answer", {"model", "cause"}),
}

# --- the deployment, under real traffic ---------------------------------------------------------


@dataclass
class Deployment:
    nats: Nats
    frontend: Frontend
    prefill: Worker
    decode: Worker

    @property
    def workers(self) -> list[Worker]:
        return [self.prefill, self.decode]


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    """A nats-server, a prefill and a decode worker with `--system-port`, and
    a `--router kv` frontend that prefills every request on the prefill
    worker: every family the dashboard reads has something to say."""
    with nats_server() as nats, contextlib.ExitStack() as stack:
        prefill = start_worker(nats, *PREFILL, system=True)
        stack.callback(prefill.proc.stop)
        decode = start_worker(nats, *DECODE, system=True)
        stack.callback(decode.proc.stop)
        frontend = start_frontend(nats, "--router", "kv", "--disagg-policy", "always")
        stack.callback(frontend.proc.stop)
        frontend.wait_workers(MODEL, {prefill.id, decode.id})
        yield Deployment(nats, frontend, prefill, decode)


@dataclass
class Scraped:
    frontend: Scrape
    workers: list[Scrape]

    def by_job(self) -> dict[str, list[Scrape]]:
        return {FRONTEND_JOB: [self.frontend], WORKER_JOB: self.workers}

    def names(self) -> set[str]:
        return set().union(*(s.names for s in [self.frontend, *self.workers]))

    def counting(self) -> set[str]:
        """The series that only grow, which rate() and increase() read:
        counters and the _bucket / _count / _sum of histograms and summaries."""
        return {
            name
            for s in [self.frontend, *self.workers]
            for f in s.families.values()
            if f.type in ("counter", "histogram", "summary")
            for name in f.sample_names
            if f.type == "counter" or name.endswith(("_bucket", "_count", "_sum"))
        }

    def labels(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for s in [self.frontend, *self.workers]:
            for name, labels in s.sampled.items():
                out.setdefault(name, set()).update(labels)
        for name, (_, labels) in NEEDS_EVENT.items():
            out.setdefault(name, set()).update(labels)
        return out


def _system(topic: str) -> str:
    """A system prompt of a few hundred tokens: several KV blocks to move and reuse."""
    return f"You are an expert on {topic}. " + " ".join(f"{topic}-fact-{i}." for i in range(60))


ANSWER = {"output": "one two three four five six seven eight nine ten", "end": "eos"}


def _chat(question: str, **extra: Any) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": _system("rivers")},
        {"role": "user", "content": question},
    ]
    return {"model": MODEL, "messages": messages, "max_tokens": 8, "mock": ANSWER, **extra}


def _leave_mid_answer(v1: str) -> None:
    """A streamed answer of 2000 tokens (20 s at the decode worker's pace),
    left after its first content chunk."""
    body = _chat("Tell me everything", stream=True, max_tokens=2000, mock={"output": "w " * 2000})
    with httpx.stream("POST", v1 + "/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            chunk = json.loads(line[6:]) if line.startswith("data: {") else {}
            if any(c["delta"].get("content") for c in chunk.get("choices", [])):
                break  # a token has come: leave now, mid-answer


def _indexed(frontend: Frontend, worker: Worker) -> int:
    """The KV blocks the frontend's kv router indexes for `worker` (/health)."""
    body = httpx.get(frontend.url + "/health", timeout=5).json()
    found = [w for w in body.get("workers", {}).get(MODEL, []) if w["id"] == worker.id]
    return found[0].get("kv_blocks_indexed", 0) if found else 0


@pytest.fixture(scope="module")
def scraped(deployment: Deployment) -> Scraped:
    """Real traffic of every kind the dashboard shows, then the three scrapes."""
    front = deployment.frontend
    r = httpx.post(front.v1 + "/chat/completions", json=_chat("first question"), timeout=60)
    assert r.status_code == 200, r.text
    # the decode worker's blocks reach the index (KV events): the next ones find their prefix
    wait_for("the KV index", lambda: _indexed(front, deployment.decode) > 0, 30)
    streamed = _chat("second question", stream=True, stream_options={"include_usage": True})
    with httpx.stream("POST", front.v1 + "/chat/completions", json=streamed, timeout=60) as s:
        assert s.status_code == 200
        assert any(line == "data: [DONE]" for line in s.iter_lines())
    body = {"model": MODEL, "prompt": _system("rivers"), "max_tokens": 8, "mock": ANSWER}
    r = httpx.post(front.v1 + "/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    r = httpx.post(front.v1 + "/chat/completions", json={**_chat("hi"), "model": "nope"})
    assert r.status_code == 404, r.text
    _leave_mid_answer(front.v1)

    def settled() -> bool:
        s = scrape(front.url)
        return (
            s.value("rotor_requests_total") >= 4
            and s.value("rotor_disconnected_clients_total") >= 1
            and s.value("rotor_requests_in_flight") == 0
        )

    wait_for("the frontend to count every request", settled, 60, detail=front.proc.text)
    return Scraped(scrape(front.url), [scrape(w.system_url or "") for w in deployment.workers])


@pytest.mark.e2e
def test_the_traffic_reached_every_part(scraped: Scraped) -> None:
    """The scrapes hold what the panels plot: outcomes (an error among them),
    latencies, tokens, routing, KV reuse, disaggregation, engine state."""
    f = scraped.frontend
    assert f.value("rotor_requests_total", status="200") == 3
    assert f.value("rotor_requests_total", status="404", model="unknown") == 1
    assert f.value("rotor_time_to_first_token_seconds_count", model=MODEL) >= 3
    assert f.value("rotor_inter_token_latency_seconds_count", model=MODEL) > 0
    assert f.value("rotor_completion_tokens_total", model=MODEL) >= 3 * 8
    assert f.value("rotor_prompt_tokens_total", model=MODEL) > 3 * 60
    assert f.value("rotor_router_decisions_total", model=MODEL) >= 4
    assert f.value("rotor_router_kv_overlap_blocks_total", model=MODEL) > 0
    assert f.value("rotor_router_kv_hits_total", model=MODEL) > 0
    assert f.value("rotor_disconnected_clients_total", model=MODEL) == 1
    assert f.value("rotor_router_live_workers", model=MODEL) == 2
    assert f.value("rotor_disagg_prefill_total", where="remote", reason="always") >= 4
    assert f.value("rotor_disagg_handover_seconds_count", model=MODEL) >= 3
    for name, (_, labels) in NEEDS_EVENT.items():  # declared, with the labels said
        assert name in f.names and f.sampled.get(name, labels) == labels, name
    prefill, decode = scraped.workers
    assert decode.value("rotor_engine_generated_tokens_total", model=MODEL) > 0
    assert decode.value("rotor_engine_kv_fetched_blocks_total", model=MODEL) > 0
    assert prefill.value("rotor_engine_kv_blocks_capacity", model=MODEL) > 0


# --- the checks --------------------------------------------------------------------------------


def _resolve(value: str, vars_: dict[str, dict[str, Any]]) -> str:
    """A matcher value with the dashboard's custom variables put in."""

    def put(m: re.Match[str]) -> str:
        return str(vars_.get(m.group(1), {}).get("query", m.group()))

    return re.sub(r"\$\{?(\w+)\}?", put, value)


def expression_problems(
    expr: str,
    scraped: Scraped,
    allowed_extra: Collection[str] = (),
    vars_: dict[str, dict[str, Any]] | None = None,
) -> list[str]:
    """Everything in `expr` that rotor's processes do not export as named."""
    try:
        parsed = parse_promql(expr)
    except (ValueError, IndexError) as e:
        return [f"cannot read it: {e}"]
    problems = []
    names, labels, by_job = scraped.names(), scraped.labels(), scraped.by_job()
    counting = scraped.counting()
    targets = target_labels()
    for fn in parsed.functions:
        if fn not in FUNCTIONS | AGGREGATIONS:
            problems.append(f"{fn}(): not a PromQL function")
    for sel in parsed.selectors:
        if not sel.metric:
            problems.append("a selector without a metric name")
            continue
        if sel.metric in allowed_extra:
            have = targets
        elif sel.metric not in names:
            problems.append(f"{sel.metric}: no rotor process exports it")
            continue
        else:
            have = labels.get(sel.metric, set()) | targets
        if sel.within in RATE_FUNCTIONS and sel.metric in names and sel.metric not in counting:
            problems.append(f"{sel.metric}: {sel.within}() of a gauge; it reads counters")
        for label, _, value in sel.matchers:
            if label not in have:
                problems.append(f"{sel.metric}{{{label}}}: its series carry no {label!r} label")
            if label == "job":
                for job in _resolve(value, vars_ or {}).split("|"):
                    if job not in jobs():
                        problems.append(f"job {job!r} is no scrape job of prometheus.yml")
                    elif sel.metric not in allowed_extra and not any(
                        sel.metric in s.names for s in by_job.get(job, [])
                    ):
                        problems.append(f"{sel.metric}: job {job!r}'s processes do not export it")
        jobless = not any(label == "job" for label, _, _ in sel.matchers)
        both = all(sel.metric in {n for s in group for n in s.sampled} for group in by_job.values())
        if jobless and both:
            problems.append(f"{sel.metric}: frontends and workers both export it; select a job")
    known = set().union(*(labels.get(m, set()) for m in parsed.metrics)) | targets
    if any(m.endswith("_bucket") for m in parsed.metrics):
        known.add("le")
    for label in parsed.grouping:
        if label not in known:
            problems.append(f"grouped by {label!r}, which no series here carries")
    return problems


def output_labels(expr: str, scraped: Scraped) -> set[str]:
    """The labels an expression's result may carry (roughly): those of its
    `by` clauses when it aggregates by some, else its series' labels."""
    parsed = parse_promql(expr)
    if parsed.by:
        return set(parsed.by)
    labels = scraped.labels()
    found = set().union(*(labels.get(m, set()) for m in parsed.metrics)) | target_labels()
    return found - {"le"}


@pytest.mark.e2e
def test_every_dashboard_expression_names_what_rotor_exports(scraped: Scraped) -> None:
    vars_ = variables()
    problems = []
    for where, expr, legend in dashboard_exprs():
        found = expression_problems(expr, scraped, vars_=vars_)
        if not found:
            for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend):
                if label not in output_labels(expr, scraped):
                    found.append(f"legend {{{{{label}}}}}: the result carries no {label!r}")
        problems += [f"{where}: {p}\n    {expr}" for p in found]
    assert not problems, "\n".join(problems)


@pytest.mark.e2e
def test_the_model_variable_reads_an_exported_label(scraped: Scraped) -> None:
    model = variables()["model"]
    query = model["query"]["query"] if isinstance(model["query"], dict) else model["query"]
    m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query)
    assert m, query
    metric, label = m.groups()
    assert label == "model" and metric in scraped.names()
    for s in [scraped.frontend, *scraped.workers]:  # every process says which models it serves
        assert {MODEL} <= {lab.get("model") for f in s.families.values() for _, lab, _ in f.samples}
        assert label in s.sampled.get(metric, set())


@pytest.mark.e2e
def test_every_alert_expression_names_what_rotor_exports(scraped: Scraped) -> None:
    problems = []
    for rule in alert_rules():
        expr = rule["expr"]
        found = expression_problems(expr, scraped, PROMETHEUS_SERIES)
        if not found:
            have = output_labels(expr, scraped)
            text = " ".join(rule["annotations"].values())
            for label in re.findall(r"\$labels\.(\w+)", text):
                if label not in have:
                    found.append(f"annotations name $labels.{label}; the result carries {have}")
        problems += [f"{rule['alert']}: {p}\n    {' '.join(expr.split())}" for p in found]
    assert not problems, "\n".join(problems)


def test_the_dashboard_covers_rotor_s_signals() -> None:
    """The panels the operators' brief asks for, by the series they read."""
    used = {m for _, expr, _ in dashboard_exprs() for m in parse_promql(expr).metrics}
    wanted = {
        "rotor_requests_total",  # request rate, errors by status
        "rotor_time_to_first_token_seconds_bucket",
        "rotor_inter_token_latency_seconds_bucket",
        "rotor_request_duration_seconds_bucket",
        "rotor_completion_tokens_total",  # output tokens/s
        "rotor_queued_requests",  # admission queue
        "rotor_engine_waiting",  # engine queue
        "rotor_engine_kv_blocks_free",  # KV usage per worker
        "rotor_engine_kv_blocks_capacity",
        "rotor_router_kv_overlap_blocks_total",  # prefix hit ratio
        "rotor_router_kv_prompt_blocks_total",
        "rotor_router_decisions_total",
        "rotor_router_migrations_total",
        "rotor_router_live_workers",
        "rotor_disagg_prefill_total",
        "rotor_disagg_handover_seconds_bucket",
        "rotor_requests_refused_overloaded_total",
        "rotor_disconnected_clients_total",
    }
    assert wanted - used == set()


@pytest.mark.e2e
def test_the_checks_catch_what_is_wrong(scraped: Scraped) -> None:
    """The checker itself: a wrong name, label, job, function or legend fails."""
    ok = 'sum by (model) (rate(rotor_requests_total{job="rotor-frontend"}[5m]))'
    assert expression_problems(ok, scraped) == []
    bad = {
        'rate(rotor_requests{job="rotor-frontend"}[5m])': "no rotor process exports it",
        'rate(rotor_requests_total{job="rotor-frontend", kind="x"}[5m])': "no 'kind' label",
        'rotor_engine_waiting{job="rotor-frontends"}': "no scrape job",
        'rotor_router_live_workers{job="rotor-worker"}': "processes do not export it",
        "rotor_engine_waiting": "select a job",
        'sum by (kind) (rotor_requests_in_flight{job="rotor-frontend"})': "grouped by 'kind'",
        'histogram_quantil(0.9, rotor_requests_in_flight{job="rotor-frontend"})': "not a PromQL",
        'sum(rate(rotor_requests_total{job="rotor-frontend"}[5m])': "cannot read it",
        'up{job="rotor-frontend"}': "no rotor process exports it",
        'sum(rate(rotor_engine_waiting{job="rotor-worker"}[5m]))': "rate() of a gauge",
    }
    for expr, why in bad.items():
        found = expression_problems(expr, scraped)
        assert any(why in p for p in found), (expr, found)


@pytest.mark.parametrize(
    ("expr", "metrics", "grouping", "functions"),
    [
        ("up", ["up"], [], []),
        (
            'histogram_quantile(0.99, sum by (le, model) (rate(a_bucket{model=~"$model"}[5m])))',
            ["a_bucket"],
            ["le", "model"],
            ["histogram_quantile", "sum", "rate"],
        ),
        (
            "sum(rate(x_total[$__rate_interval])) by (job) / on (job) group_left(pool) y",
            ["x_total", "y"],
            ["job", "job", "pool"],
            ["sum", "rate"],
        ),
        (
            'a{s="by (x) sum(y)", t!~"z|w"} offset 1h30m > bool 0.5 and b unless c',
            ["a", "b", "c"],
            [],
            [],
        ),
        (
            "max without (instance) (g) * -1e3 + Inf - count(h) or NaN",
            ["g", "h"],
            ["instance"],
            ["max", "count"],
        ),
        ("rate(x[5m:1m]) @ 1700000000", ["x"], [], ["rate"]),
    ],
)
def test_the_promql_reader(
    expr: str, metrics: list[str], grouping: list[str], functions: list[str]
) -> None:
    """Metric names only: not labels, keywords, functions, durations, strings or numbers."""
    parsed = parse_promql(expr)
    assert (parsed.metrics, parsed.grouping, parsed.functions) == (metrics, grouping, functions)


def test_the_promql_reader_knows_which_call_holds_each_selector() -> None:
    expr = "sum by (job) (rate(a[5m])) / on (job) group_left max(b) + increase({c='x'}[1h]) - d"
    within = [(s.metric, s.within) for s in parse_promql(expr).selectors]
    assert within == [("a", "rate"), ("b", "max"), ("", "increase"), ("d", "")]


# --- the dashboard's shape -----------------------------------------------------------------------

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's own variables a query may use
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range", "__all"}


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    dash = dashboard()
    assert 36 <= dash["schemaVersion"] <= 41
    assert dash["uid"] and dash["title"]
    vars_ = variables()
    assert vars_["datasource"]["type"] == "datasource"
    assert vars_["datasource"]["query"] == "prometheus"
    assert vars_["model"]["type"] == "query" and vars_["model"]["datasource"] == DATASOURCE
    assert vars_["model"]["includeAll"] and vars_["model"]["allValue"] == ".*"
    ids: list[int] = []
    boxes: list[tuple[int, int, int, int, str]] = []
    for p in panels(dash):
        ids.append(p["id"])
        where = f"panel {p['id']} {p.get('title')!r}"
        grid = p["gridPos"]
        assert all(isinstance(grid[k], int) for k in "hwxy"), where
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
        boxes.append((grid["x"], grid["y"], grid["w"], grid["h"], where))
        assert p.get("title"), where
        if p["type"] == "row":
            assert "targets" not in p and grid["w"] == 24, where
            continue
        assert p["datasource"] == DATASOURCE, where
        assert p["targets"], where
        refs = [t["refId"] for t in p["targets"]]
        assert len(set(refs)) == len(refs), where
        for t in p["targets"]:
            assert isinstance(t["expr"], str) and t["expr"].strip(), where
            assert t.get("datasource", DATASOURCE) == DATASOURCE, where
        unit = p["fieldConfig"]["defaults"]["unit"]
        if any("histogram_quantile" in t["expr"] for t in p["targets"]):
            assert unit == "s", f"{where}: a latency quantile in {unit!r}"
    assert len(set(ids)) == len(ids), "panel ids repeat"
    for i, (x1, y1, w1, h1, a) in enumerate(boxes):
        for x2, y2, w2, h2, b in boxes[i + 1 :]:
            apart = x1 + w1 <= x2 or x2 + w2 <= x1 or y1 + h1 <= y2 or y2 + h2 <= y1
            assert apart, f"{a} and {b} overlap"


def test_the_dashboard_names_only_its_own_variables() -> None:
    defined = set(variables()) | GRAFANA_VARIABLES
    text = DASHBOARD.read_text()
    used = set(re.findall(r"\$\{?(\w+)", text))
    assert used - defined == set()
    for name in ("frontend_job", "worker_job"):
        assert variables()[name]["query"] in jobs(), name


# --- the alert rules' shape ----------------------------------------------------------------------

_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def test_the_alert_rules_are_prometheus_rules() -> None:
    doc = yaml.safe_load(ALERTS.read_text())
    groups = [g["name"] for g in doc["groups"]]
    assert len(set(groups)) == len(groups)
    names = []
    for group in doc["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit"}, group["name"]
        assert group["rules"], group["name"]
        for rule in group["rules"]:
            name = rule.get("alert")
            assert name and re.fullmatch(r"[A-Z][A-Za-z0-9]+", name), rule
            names.append(name)
            assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
            assert isinstance(rule["expr"], str) and "$" not in rule["expr"], name
            assert _DURATION.match(str(rule["for"])), name
            assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
            assert rule["annotations"]["summary"].strip(), name
            assert rule["annotations"]["description"].strip(), name
            for text in rule["annotations"].values():  # Go templates: balanced braces
                assert text.count("{{") == text.count("}}"), name
    assert len(set(names)) == len(names)


def test_the_alerts_the_brief_asks_for_are_there() -> None:
    """No live worker, errors above 5 %, TTFT p99 above a target, KV cache near full."""
    exprs = [" ".join(r["expr"].split()) for r in alert_rules()]

    def some(*parts: str) -> bool:
        return any(all(p in e for p in parts) for e in exprs)

    assert some("rotor_router_live_workers", "== 0")
    assert some("rotor_requests_total", 'status=~"5.."', "> 0.05")
    assert some("histogram_quantile(0.99", "rotor_time_to_first_token_seconds_bucket")
    assert some("rotor_engine_kv_blocks_free", "rotor_engine_kv_blocks_capacity", "> 0.9")


# --- prometheus.yml ----------------------------------------------------------------------------------


def test_the_scrape_config_scrapes_frontends_and_workers() -> None:
    config = prometheus_config()
    assert _DURATION.match(config["global"]["scrape_interval"])
    for rules in config["rule_files"]:
        assert (PROMETHEUS.parent / rules).exists(), rules
    found = jobs()
    assert len(found) == len(config["scrape_configs"]), "job names repeat"
    assert {FRONTEND_JOB, WORKER_JOB} <= set(found)
    for name, job in found.items():
        assert job.get("metrics_path", "/metrics") == "/metrics", name
        for static in job["static_configs"]:
            assert static["targets"], name
            for target in static["targets"]:
                host, _, port = target.rpartition(":")
                assert host and 1 <= int(port) <= 65535, target
            for label in static.get("labels", {}):
                assert re.fullmatch(r"[a-z_][a-z0-9_]*", label) and not label.startswith("__")
                assert label not in ("job", "instance"), label
    pools = {
        s.get("labels", {}).get("pool") for s in found[WORKER_JOB]["static_configs"]
    }  # what Pool.pools() calls them: agg and decode workers are the decode pool
    assert pools <= {"decode", "prefill"}


@pytest.mark.e2e
def test_the_scraped_paths_are_rotor_s(deployment: Deployment) -> None:
    """Each job's metrics_path answers on the process it scrapes."""
    paths = {name: job.get("metrics_path", "/metrics") for name, job in jobs().items()}
    front = httpx.get(deployment.frontend.url + paths[FRONTEND_JOB], timeout=10)
    worker = httpx.get((deployment.decode.system_url or "") + paths[WORKER_JOB], timeout=10)
    assert front.status_code == worker.status_code == 200
    assert "rotor_requests_total" in front.text and "rotor_engine_waiting" in worker.text


# --- naming conventions ------------------------------------------------------------------------------

# Units that are not Prometheus's base units (seconds, bytes)
_NOT_BASE_UNITS = {
    "ms", "millis", "milliseconds", "us", "micros", "microseconds", "ns", "nanoseconds",
    "minutes", "hours", "days", "kb", "mb", "gb", "kib", "mib", "gib", "kilobytes",
    "megabytes", "gigabytes", "percent", "pct",
}  # fmt: skip
_HISTOGRAM_UNITS = ("_seconds", "_bytes", "_tokens", "_blocks", "_ratio")


def convention_problems(families: dict[str, Family]) -> dict[str, list[str]]:
    """Prometheus's naming rules (prometheus.io/docs/practices/naming), per family."""
    problems: dict[str, list[str]] = {}
    created = {f"{n.removesuffix('_total')}_created" for n, f in families.items()}
    for name, f in families.items():
        if f.type == "gauge" and name in created:
            continue  # OpenMetrics' _created series of a counter or histogram
        found = []
        if not re.fullmatch(r"rotor_[a-z][a-z0-9]*(_[a-z0-9]+)*", name):
            found.append("not snake_case under the rotor_ prefix")
        if f.type == "counter" and not name.endswith("_total"):
            found.append("a counter not ending in _total")
        if f.type != "counter" and re.search(r"_(total|count|sum|bucket)$", name):
            found.append(f"a {f.type} with a counter's or histogram's suffix")
        if f.type == "histogram" and not name.endswith(_HISTOGRAM_UNITS):
            found.append("a histogram without its unit (_seconds, _bytes, …)")
        bad = _NOT_BASE_UNITS & set(name.split("_"))
        if bad:
            found.append(f"unit {sorted(bad)}: use base units (_seconds, _bytes, ratios)")
        if not f.help.strip() or f.help.strip() == name:
            found.append("no help text")
        for sample, labels, _ in f.samples:
            for label in labels:
                if not re.fullmatch(r"[a-z][a-z0-9_]*", label):
                    found.append(f"label {label!r} not snake_case")
                if label == "le" and not sample.endswith("_bucket"):
                    found.append("an `le` label off a histogram bucket")
                if label == "quantile" and f.type != "summary":
                    found.append("a `quantile` label off a summary")
        if f.type == "histogram":
            found += _histogram_problems(f)
        if found:
            problems[name] = sorted(set(found))
    return problems


def _histogram_problems(f: Family) -> list[str]:
    """Each series: cumulative buckets ending at +Inf, which equals its _count."""
    found = []
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for sample, labels, value in f.samples:
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        entry = series.setdefault(key, {"buckets": []})
        if sample.endswith("_bucket"):
            entry["buckets"].append((float(labels["le"]), value))
        else:
            entry[sample.rsplit("_", 1)[1]] = value
    for entry in series.values():
        buckets = entry["buckets"]
        counts = [v for _, v in buckets]
        if not buckets or buckets[-1][0] != float("inf"):
            found.append("buckets without le=+Inf last")
        elif counts != sorted(counts) or counts[-1] != entry.get("count"):
            found.append("buckets not cumulative, or +Inf is not _count")
    return found


@pytest.mark.e2e
def test_rotor_s_names_follow_prometheus_conventions(scraped: Scraped) -> None:
    problems: dict[str, list[str]] = {}
    for s in [scraped.frontend, *scraped.workers]:
        for name, found in convention_problems(s.families).items():
            problems.setdefault(name, found)
    assert not problems, "\n".join(f"{n}: {'; '.join(p)}" for n, p in problems.items())


def test_the_convention_rules_catch_a_bad_name() -> None:
    text = (
        "# HELP rotor_latency_ms x\n# TYPE rotor_latency_ms gauge\nrotor_latency_ms 1\n"
        "# HELP rotor_Hits y\n# TYPE rotor_Hits counter\nrotor_Hits 1\n"
        "# HELP rotor_wait z\n# TYPE rotor_wait histogram\n"
        'rotor_wait_bucket{le="1.0"} 2\nrotor_wait_bucket{le="+Inf"} 1\n'
        "rotor_wait_count 1\nrotor_wait_sum 1\n"
        "# HELP rotor_depth_total \n# TYPE rotor_depth_total gauge\nrotor_depth_total 1\n"
    )
    found = convention_problems(parse_exposition(text))
    assert any("base units" in p for p in found["rotor_latency_ms"])
    assert any("snake_case" in p for p in found["rotor_Hits"])
    assert any("_total" in p for p in found["rotor_Hits"])
    assert any("unit" in p for p in found["rotor_wait"])
    assert any("cumulative" in p for p in found["rotor_wait"])
    assert any("help" in p for p in found["rotor_depth_total"])
    assert any("suffix" in p for p in found["rotor_depth_total"])


# --- promtool, where it is installed -----------------------------------------------------------------


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_config_the_rules_and_the_dashboard_s_queries() -> None:
    """Prometheus's own parser on every file and every dashboard query (its
    Grafana variables replaced by values), when promtool is on PATH."""
    run = [shutil.which("promtool") or "promtool"]
    checked = subprocess.run([*run, "check", "config", str(PROMETHEUS)], capture_output=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    values = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
    rules = []
    for i, (_, expr, _) in enumerate(dashboard_exprs()):
        text = re.sub(
            r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), "x"), expr
        )  # a variable inside a string becomes a plain value
        rules.append({"record": f"rotor:dashboard_{i}", "expr": text})
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
        f.flush()
        checked = subprocess.run([*run, "check", "rules", f.name], capture_output=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
