"""Distributed tracing for real: `rotor run`, and `rotor frontend` with `rotor
worker`s (the mocker) over a real nats-server, export their spans over
OTLP/HTTP to a receiver in this test process (tests/support/otlp.py), which
decodes them as a collector would. One trace per request, its spans linked
parent to child across the processes, a client's traceparent kept, the
request id on every span, a migration as a second attempt; off, nothing is
exported and OpenTelemetry's SDK is never imported; a collector that is down costs
no request anything."""

from __future__ import annotations

import json
import secrets
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from support.cluster import (
    Frontend,
    Nats,
    Worker,
    cluster_procs,
    nats_server,
    start_frontend,
    start_worker,
    wait_for,
)
from support.imports import MARK, WATCHED
from support.otlp import CLIENT, SERVER, ReceivedSpan, Receiver, otlp_receiver
from support.server import Server, free_port, rotor_server
from support.sse import live_chunks

# every server of the module shares the receiver: one xdist worker runs them all
pytestmark = pytest.mark.e2e

FAST = ("out=mocker", "--speedup-ratio", "0")
SLOW = ("out=mocker", "--speedup-ratio", "1")  # 10 ms per decode step
# spans leave in batches every 50 ms; nothing from the tester's environment turns tracing on
ENV = {
    "OTEL_BSP_SCHEDULE_DELAY": "50",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "",
    "OTEL_SERVICE_NAME": "",
    "OTEL_SDK_DISABLED": "",
    "OTEL_TRACES_EXPORTER": "",
}
MODEL = "mock-model"
DISAGG = "traced-disagg"
MIGRATE = "traced-migrate"
ASK = [{"role": "user", "content": "Tell me a story"}]
ANSWER = "Traced words, one after another, until the end."
STORY = " ".join(f"word{i}" for i in range(120))
ROOT = "POST /v1/chat/completions"


def new_id(label: str) -> str:
    return f"{label}-{secrets.token_hex(6)}"


def traceparent() -> tuple[str, str, str]:
    """(header, trace id, span id) of a client's own sampled span."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def chat(
    url: str, rid: str, stream: bool = False, headers: dict[str, str] | None = None, **body: Any
) -> tuple[str, dict[str, Any], httpx.Headers]:
    """(text, usage, response headers) of one chat request sent as `x-request-id: rid`."""
    payload = {"model": MODEL, "messages": ASK, "stream": stream, **body}
    sent = {"x-request-id": rid, **(headers or {})}
    if not stream:
        r = httpx.post(url + "/v1/chat/completions", json=payload, headers=sent, timeout=60)
        assert r.status_code == 200, r.text
        body_ = r.json()
        return body_["choices"][0]["message"]["content"], body_["usage"], r.headers
    payload["stream_options"] = {"include_usage": True}
    text: list[str] = []
    usage: dict[str, Any] = {}
    with httpx.stream(
        "POST", url + "/v1/chat/completions", json=payload, headers=sent, timeout=60
    ) as r:
        assert r.status_code == 200, r.read()
        for chunk in live_chunks(r):
            for c in chunk["choices"]:
                text.append(c["delta"].get("content") or "")
            usage = chunk.get("usage") or usage
        return "".join(text), usage, r.headers


def wait_spans(receiver: Receiver, rid: str, want: dict[str, int]) -> dict[str, list[ReceivedSpan]]:
    """The request's spans by name, once at least `want[name]` of each have arrived."""

    def arrived() -> bool:
        names = Counter(s.name for s in receiver.of_request(rid))
        return all(names[name] >= n for name, n in want.items())

    wait_for(
        f"spans {want} of request {rid}",
        arrived,
        30,
        detail=lambda: "\n".join(f"{s.name} {s.attributes}" for s in receiver.of_request(rid)),
    )
    spans: dict[str, list[ReceivedSpan]] = {}
    for s in receiver.of_request(rid):
        spans.setdefault(s.name, []).append(s)
    return spans


def one_trace(receiver: Receiver, rid: str) -> tuple[str, ReceivedSpan]:
    """The request's spans are one trace, every span of which carries the
    request id, with one root: (trace id, root)."""
    spans = receiver.spans()  # one snapshot
    mine = [s for s in spans if s.attributes.get("rotor.request_id") == rid]
    (trace_id,) = {s.trace_id for s in mine}
    in_trace = [s for s in spans if s.trace_id == trace_id]
    assert {s.span_id for s in in_trace} == {s.span_id for s in mine}  # x-request-id on all
    ids = {s.span_id for s in in_trace}
    roots = [s for s in in_trace if s.parent_id not in ids]
    assert [r.name for r in roots] == [ROOT]
    return trace_id, roots[0]


# -- rotor run ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as r:
        yield r


@pytest.fixture(scope="module")
def run_server(receiver: Receiver) -> Iterator[Server]:
    """`rotor run out=mocker`, traced, under the import watcher (tests/support/imports.py)."""
    args = (*FAST, "--otlp-endpoint", receiver.url)
    with rotor_server(*args, env=ENV, launcher=WATCHED) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_rotor_run_a_request_is_one_trace(
    run_server: Server, receiver: Receiver, stream: bool
) -> None:
    rid = new_id("run")
    text, usage, _ = chat(run_server.url, rid, stream, mock={"output": ANSWER})
    assert text == ANSWER
    spans = wait_spans(receiver, rid, {ROOT: 1, "rotor.prepare": 1, "rotor.generate": 1})
    _, root = one_trace(receiver, rid)
    assert root.parent_id == "" and root.kind == SERVER
    assert root.service == "rotor"
    a = root.attributes
    assert a["http.request.method"] == "POST" and a["http.route"] == "/v1/chat/completions"
    assert a["http.response.status_code"] == 200
    assert a["gen_ai.request.model"] == MODEL
    assert a["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert a["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert a["rotor.ttft_ms"] > 0 and "first_token" in root.events
    assert not root.failed
    (prepare,) = spans["rotor.prepare"]
    assert prepare.parent_id == root.span_id
    assert prepare.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    (generate,) = spans["rotor.generate"]
    assert generate.parent_id == root.span_id
    g = generate.attributes
    assert g["rotor.stage"] == "agg" and g["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert g["gen_ai.usage.output_tokens"] >= usage["completion_tokens"] > 0
    assert g["rotor.finish_reason"] == "eos" and "first_output" in generate.events
    assert g["rotor.queue_prefill_ms"] >= 0 and g["rotor.decode_ms"] >= 0


def test_a_clients_traceparent_is_kept(run_server: Server, receiver: Receiver) -> None:
    header, trace_id, client_span = traceparent()
    rid = new_id("parent")
    chat(run_server.url, rid, headers={"traceparent": header}, mock={"output": ANSWER})
    spans = wait_spans(receiver, rid, {ROOT: 1, "rotor.prepare": 1, "rotor.generate": 1})
    found, root = one_trace(receiver, rid)
    assert found == trace_id
    assert root.parent_id == client_span
    assert {s.trace_id for group in spans.values() for s in group} == {trace_id}


def test_a_refused_request_is_a_span_with_its_status(
    run_server: Server, receiver: Receiver
) -> None:
    """A 400 still has its request span, with its status; a client's error
    is not the server's (OpenTelemetry's rule: a server span fails on a 5xx
    only)."""
    rid = new_id("bad")
    r = httpx.post(
        run_server.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": ASK, "max_tokens": -1},
        headers={"x-request-id": rid},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    (root,) = wait_spans(receiver, rid, {ROOT: 1})[ROOT]
    assert root.attributes["http.response.status_code"] == 400
    assert not root.failed


@pytest.mark.parametrize(
    ("path", "name", "route"),
    [
        (f"/v1/models/{MODEL}", "GET /v1/models/{model_id:path}", "/v1/models/{model_id:path}"),
        ("/v1/no-such-route", "GET", None),
    ],
    ids=["template", "no-route"],
)
def test_a_request_span_is_named_after_its_route_not_its_path(
    run_server: Server, receiver: Receiver, path: str, name: str, route: str | None
) -> None:
    """OpenTelemetry's rule: `http.route` is the matched route's template, so
    one route is one span name whatever its parameters; a path no route
    matches has none, and the span is named by its method."""
    rid = new_id("route")
    r = httpx.get(run_server.url + path, headers={"x-request-id": rid}, timeout=30)
    assert r.status_code == (200 if route else 404), r.text
    (root,) = wait_spans(receiver, rid, {name: 1})[name]
    assert root.attributes.get("http.route") == route
    assert root.attributes["url.path"] == path


def test_off_nothing_is_exported_and_the_sdk_is_never_imported(
    run_server: Server, receiver: Receiver
) -> None:
    # the watcher sees it when tracing is on (it can fail)
    assert MARK in run_server.log
    off_env = {**ENV, "OTEL_SERVICE_NAME": "rotor-off"}  # everything but a collector
    with rotor_server(*FAST, env=off_env, launcher=WATCHED) as off:
        rids = [new_id("off") for _ in range(3)]
        for rid, stream in zip(rids, (False, True, False), strict=True):
            text, _, _ = chat(off.url, rid, stream, mock={"output": ANSWER})
            assert text == ANSWER
        assert httpx.get(off.url + "/health", timeout=5).status_code == 200
        # a traced request after them, whose spans arrive: the receiver was listening
        later = new_id("after-off")
        chat(run_server.url, later, mock={"output": ANSWER})
        wait_spans(receiver, later, {ROOT: 1})
        log = off.log
    assert MARK not in log, log
    assert not [s for s in receiver.spans() if s.service == "rotor-off"]
    assert not [s for rid in rids for s in receiver.of_request(rid)]


def test_a_collector_that_is_down_fails_no_request() -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with rotor_server(*FAST, "--otlp-endpoint", down, env=ENV, launcher=WATCHED) as server:
        for i in range(12):
            text, usage, _ = chat(server.url, new_id("down"), i % 2 == 1, mock={"output": ANSWER})
            assert text == ANSWER and usage["completion_tokens"] > 0
        assert httpx.get(server.url + "/health", timeout=5).status_code == 200
        assert server.process.poll() is None
        assert MARK in server.log  # tracing was on, exporting to nowhere


def test_each_http_process_exports_its_own_spans(receiver: Receiver) -> None:
    env = {**ENV, "OTEL_SERVICE_NAME": "rotor-http-workers"}
    args = (*FAST, "--http-workers", "2", "--otlp-endpoint", receiver.url)
    with rotor_server(*args, env=env) as server:
        sent: list[str] = []

        def pids() -> set[int | None]:
            return {s.pid for s in receiver.spans() if s.service == "rotor-http-workers"}

        def both() -> bool:
            rid = new_id("workers")
            chat(server.url, rid, mock={"output": ANSWER})  # a new connection each time
            sent.append(rid)
            return len(pids()) >= 2

        wait_for("spans from both HTTP processes", both, 60)
        assert server.process.pid not in pids()  # the engine's process serves no HTTP
        for rid in sent[:3]:  # a request's spans are its HTTP process's, whole
            spans = wait_spans(receiver, rid, {ROOT: 1, "rotor.prepare": 1, "rotor.generate": 1})
            assert len({s.pid for group in spans.values() for s in group}) == 1


# -- rotor frontend + rotor worker over NATS ------------------------------------------------


@dataclass
class Cluster:
    nats: Nats
    frontend: Frontend
    workers: list[Worker]
    prefill: Worker
    decode: Worker


@pytest.fixture(scope="module")
def cluster(receiver: Receiver) -> Iterator[Cluster]:
    """A traced frontend (prefilling remotely whenever a model has prefill
    workers), two traced agg workers of mock-model, and a prefill and a
    decode worker of their own model."""
    trace = ("--otlp-endpoint", receiver.url)
    with nats_server() as nats, cluster_procs() as procs:
        workers = []
        for _ in range(2):
            workers.append(start_worker(nats, *FAST, *trace, env=ENV))
            procs.append(workers[-1].proc)
        roles = []
        for mode in ("prefill", "decode"):
            args = (*FAST, "--model-name", DISAGG, "--disaggregation-mode", mode, *trace)
            roles.append(start_worker(nats, *args, env=ENV))
            procs.append(roles[-1].proc)
        frontend = start_frontend(nats, *trace, "--disagg-policy", "always", env=ENV)
        procs.append(frontend.proc)
        frontend.wait_workers(MODEL, {w.id for w in workers})
        frontend.wait_workers(DISAGG, {w.id for w in roles})
        yield Cluster(nats, frontend, workers, roles[0], roles[1])


def test_frontend_and_worker_spans_are_one_trace(cluster: Cluster, receiver: Receiver) -> None:
    header, trace_id, client_span = traceparent()
    rid = new_id("nats")
    text, usage, headers = chat(
        cluster.frontend.url, rid, True, headers={"traceparent": header}, mock={"output": ANSWER}
    )
    assert text == ANSWER
    worker = headers["x-rotor-worker"]
    want = {ROOT: 1, "rotor.prepare": 1, "rotor.route": 1, "rotor.attempt": 1, "rotor.generate": 1}
    spans = wait_spans(receiver, rid, want)
    found, root = one_trace(receiver, rid)
    assert found == trace_id and root.parent_id == client_span
    assert root.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    (route,) = spans["rotor.route"]
    assert route.parent_id == root.span_id
    assert route.attributes["rotor.worker_id"] == worker
    assert sorted(route.attributes["rotor.candidates"]) == sorted(w.id for w in cluster.workers)
    assert "rotor.disagg.where" not in route.attributes  # an aggregated model decides nothing
    (attempt,) = spans["rotor.attempt"]
    assert attempt.parent_id == root.span_id and attempt.kind == CLIENT
    assert attempt.attributes["rotor.worker_id"] == worker
    assert attempt.attributes["rotor.stage"] == "agg" and attempt.attributes["rotor.attempt"] == 0
    (generate,) = spans["rotor.generate"]
    assert generate.parent_id == attempt.span_id and generate.kind == SERVER  # across NATS
    g = generate.attributes
    assert generate.service == "rotor-worker" and g["rotor.worker_id"] == worker
    assert g["rotor.engine_request_id"] == attempt.attributes["rotor.engine_request_id"]
    assert g["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    frontend_side = [s for name, group in spans.items() if name != "rotor.generate" for s in group]
    assert {s.service for s in frontend_side} == {"rotor-frontend"}


def test_a_disaggregated_request_has_a_prefill_and_a_decode_attempt(
    cluster: Cluster, receiver: Receiver
) -> None:
    """...and the decode worker's fetch of the prefill's KV blocks is a span
    under its generate span, with the prefill worker's release under it."""
    rid = new_id("disagg")
    long_ask = [{"role": "user", "content": " ".join(f"block{i}" for i in range(80))}]
    text, usage, headers = chat(
        cluster.frontend.url, rid, model=DISAGG, messages=long_ask, mock={"output": ANSWER}
    )
    assert text == ANSWER
    assert headers["x-rotor-worker"] == f"prefill={cluster.prefill.id}, decode={cluster.decode.id}"
    want = {
        ROOT: 1,
        "rotor.route": 1,
        "rotor.attempt": 2,
        "rotor.generate": 2,
        "rotor.kv_fetch": 1,
        "rotor.kv_release": 1,
    }
    spans = wait_spans(receiver, rid, want)
    _, root = one_trace(receiver, rid)
    (route,) = spans["rotor.route"]
    assert route.attributes["rotor.disagg.where"] == "remote"
    assert route.attributes["rotor.disagg.reason"] == "always"
    attempts = {s.attributes["rotor.stage"]: s for s in spans["rotor.attempt"]}
    assert set(attempts) == {"prefill", "decode"}
    assert attempts["prefill"].attributes["rotor.worker_id"] == cluster.prefill.id
    assert attempts["decode"].attributes["rotor.worker_id"] == cluster.decode.id
    assert all(a.parent_id == root.span_id and not a.failed for a in attempts.values())
    for generate in spans["rotor.generate"]:
        stage = generate.attributes["rotor.stage"]
        assert generate.parent_id == attempts[stage].span_id
        assert (
            generate.attributes["rotor.worker_id"] == attempts[stage].attributes["rotor.worker_id"]
        )
        assert generate.attributes["rotor.role"] == stage
    decode = next(g for g in spans["rotor.generate"] if g.attributes["rotor.stage"] == "decode")
    (fetch,) = spans["rotor.kv_fetch"]
    assert fetch.parent_id == decode.span_id and fetch.kind == CLIENT and not fetch.failed
    f = fetch.attributes
    assert f["rotor.kv.prefill_worker"] == cluster.prefill.id
    full_blocks = usage["prompt_tokens"] // 16  # the mocker's block size
    assert f["rotor.kv.blocks_offered"] == f["rotor.kv.blocks_wanted"] == full_blocks > 0
    assert f["rotor.kv.blocks_fetched"] == full_blocks and f["rotor.kv.transfer_ms"] >= 0
    (release,) = spans["rotor.kv_release"]
    assert release.parent_id == fetch.span_id and release.kind == SERVER
    assert release.service == "rotor-worker"
    assert release.attributes["rotor.worker_id"] == cluster.prefill.id
    assert release.attributes["rotor.kv.blocks_granted"] == full_blocks


def test_a_migration_is_a_second_attempt_span(cluster: Cluster, receiver: Receiver) -> None:
    """A worker killed mid-stream (SIGKILL): the first attempt fails, the
    second is another worker's, says why it moved, and holds that worker's
    generate span; the dead worker never ended its own."""
    trace = ("--otlp-endpoint", receiver.url)
    args = (*SLOW, "--model-name", MIGRATE, *trace)
    with cluster_procs() as procs:
        workers: dict[str, Worker] = {}
        for _ in range(2):
            w = start_worker(cluster.nats, *args, env=ENV)
            workers[w.id] = w
            procs.append(w.proc)
        cluster.frontend.wait_workers(MIGRATE, set(workers))
        rid = new_id("migrate")
        killed: list[str] = []
        body = {
            "model": MIGRATE,
            "messages": ASK,
            "stream": True,
            "max_tokens": 2000,
            "mock": {"output": STORY},
        }
        text: list[str] = []
        with httpx.stream(
            "POST",
            cluster.frontend.v1 + "/chat/completions",
            json=body,
            headers={"x-request-id": rid},
            timeout=60,
        ) as r:
            assert r.status_code == 200, r.read()
            first = r.headers["x-rotor-worker"]
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                for c in json.loads(line[6:])["choices"]:
                    text.append(c["delta"].get("content") or "")
                if not killed and len("".join(text)) > 60:
                    workers[first].proc.kill()
                    killed.append(first)
        assert killed and "".join(text) == STORY
        want = {ROOT: 1, "rotor.route": 2, "rotor.attempt": 2, "rotor.generate": 1}
        spans = wait_spans(receiver, rid, want)
    _, root = one_trace(receiver, rid)
    before, after = sorted(spans["rotor.attempt"], key=lambda s: s.attributes["rotor.attempt"])
    assert before.attributes["rotor.worker_id"] == first and before.failed
    assert "rotor.migration.cause" not in before.attributes
    (survivor,) = set(workers) - {first}
    assert after.attributes["rotor.worker_id"] == survivor and not after.failed
    assert after.attributes["rotor.attempt"] == 1
    assert after.attributes["rotor.migration.cause"] in {"worker_gone", "timeout", "unavailable"}
    assert after.attributes["rotor.resume_from"] > 0
    assert all(a.parent_id == root.span_id for a in (before, after))
    (generate,) = spans["rotor.generate"]
    assert generate.parent_id == after.span_id
    assert generate.attributes["rotor.worker_id"] == survivor
