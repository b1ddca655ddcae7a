"""The access log: one record per HTTP request, written when the response is
over (a stream: when it ends, or when its client went away), naming the
method, route, status, model, token counts, duration and request id — the id
the response carries. With `--log-format json` every line the process writes
is one JSON object; in text the line reads at a glance, and not at all below
`--log-level warning`. Probes log at debug."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from support.server import Server, rotor_server
from support.sse import data_events
from support.wait import wait_for

TIMEOUT_S = 30
CHAT = {"model": "echo", "messages": [{"role": "user", "content": "hello there"}]}


@pytest.fixture(scope="module")
def json_server() -> Iterator[Server]:
    # 2 ms a character: short answers are quick, a long one streams for seconds.
    with rotor_server(
        "--log-level", "info", "--log-format", "json", env={"ROTOR_ECHO_DELAY_MS": "2"}
    ) as srv:
        yield srv


def records(server: Server) -> list[dict[str, Any]]:
    """Every line the server wrote, each parsed as one JSON object."""
    out = []
    for line in server.log.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
        assert isinstance(record, dict), line
        out.append(record)
    return out


def access_records(server: Server, rid: str) -> list[dict[str, Any]]:
    """The access records of request `rid`, once at least one was written."""
    found: list[dict[str, Any]] = []

    def written() -> bool:
        found[:] = [
            r for r in records(server) if r["logger"] == "rotor.access" and r["request_id"] == rid
        ]
        return bool(found)

    wait_for(f"an access record for {rid}", written, TIMEOUT_S, detail=lambda: server.log)
    return found


def only_record(server: Server, rid: str) -> dict[str, Any]:
    """The one access record of `rid`. A request made after it and logged
    shows that no second record of `rid` was still to come."""
    first = access_records(server, rid)
    later = httpx.get(server.url + "/v1/models", timeout=TIMEOUT_S)
    access_records(server, later.headers["x-request-id"])
    found = access_records(server, rid)
    assert len(found) == 1, found
    assert found == first
    return found[0]


def check_usage(record: dict[str, Any], usage: dict[str, Any]) -> None:
    assert record["prompt_tokens"] == usage["prompt_tokens"] > 0
    assert record["completion_tokens"] == usage["completion_tokens"] > 0


def test_a_chat_has_one_record_with_its_usage_and_id(json_server: Server) -> None:
    r = httpx.post(json_server.v1 + "/chat/completions", json=CHAT, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    rid = r.headers["x-request-id"]
    body = r.json()
    assert body["id"] == f"chatcmpl-{rid}"
    record = only_record(json_server, rid)
    assert record["level"] == "info"
    assert (record["method"], record["route"], record["status"]) == (
        "POST",
        "/v1/chat/completions",
        200,
    )
    assert record["model"] == "echo"
    check_usage(record, body["usage"])
    assert isinstance(record["duration_ms"], float) and record["duration_ms"] >= 0
    assert "disconnected" not in record
    assert record["msg"].startswith("POST /v1/chat/completions 200 model=echo ")


def test_a_stream_has_one_record_once_it_ended(json_server: Server) -> None:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream(
        "POST", json_server.v1 + "/chat/completions", json=body, timeout=TIMEOUT_S
    ) as r:
        assert r.status_code == 200
        rid = r.headers["x-request-id"]
        chunks = data_events(r)
    assert {c["id"] for c in chunks} == {f"chatcmpl-{rid}"}
    record = only_record(json_server, rid)
    assert (record["route"], record["status"], record["model"]) == (
        "/v1/chat/completions",
        200,
        "echo",
    )
    check_usage(record, chunks[-1]["usage"])
    assert "disconnected" not in record


def test_a_completion_has_one_record(json_server: Server) -> None:
    body = {"model": "echo", "prompt": "once upon a time", "max_tokens": 50}
    r = httpx.post(
        json_server.v1 + "/completions",
        json=body,
        headers={"x-request-id": "cmpl-log-1"},
        timeout=TIMEOUT_S,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-request-id"] == "cmpl-log-1"
    assert r.json()["id"] == "cmpl-cmpl-log-1"
    record = only_record(json_server, "cmpl-log-1")
    assert (record["route"], record["status"], record["model"]) == ("/v1/completions", 200, "echo")
    check_usage(record, r.json()["usage"])


def test_an_unknown_field_is_a_400_record_naming_the_model(json_server: Server) -> None:
    r = httpx.post(
        json_server.v1 + "/chat/completions", json={**CHAT, "bogus": 1}, timeout=TIMEOUT_S
    )
    assert r.status_code == 400, r.text
    record = only_record(json_server, r.headers["x-request-id"])
    assert (record["route"], record["status"], record["model"]) == (
        "/v1/chat/completions",
        400,
        "echo",
    )
    assert "prompt_tokens" not in record and "completion_tokens" not in record


@pytest.mark.parametrize(
    ("path", "body", "model"),
    [
        ("/v1/chat/completions", {**CHAT, "model": "no-such-model"}, "no-such-model"),
        ("/v1/no/such/route", {}, None),
    ],
)
def test_a_404_has_a_record_and_the_id_header(
    json_server: Server, path: str, body: dict[str, Any], model: str | None
) -> None:
    r = httpx.post(json_server.url + path, json=body, timeout=TIMEOUT_S)
    assert r.status_code == 404, r.text
    record = only_record(json_server, r.headers["x-request-id"])
    assert (record["method"], record["route"], record["status"]) == ("POST", path, 404)
    assert record.get("model") == model


def test_a_stream_the_client_abandons_has_one_record_saying_so(json_server: Server) -> None:
    body = {
        "model": "echo",
        "messages": [{"role": "user", "content": "z" * 2000}],  # 4 s at 2 ms a token
        "stream": True,
    }
    with (
        httpx.Client(timeout=TIMEOUT_S) as http,
        http.stream("POST", json_server.v1 + "/chat/completions", json=body) as r,
    ):
        rid = r.headers["x-request-id"]
        lines = r.iter_lines()  # kept alive: dropping it would close the connection
        seen = 0
        while seen < 5:
            seen += next(lines).startswith("data: ")
    record = only_record(json_server, rid)
    assert (record["status"], record["model"], record["disconnected"]) == (200, "echo", True)
    assert record["prompt_tokens"] == 2000
    assert 0 < record["completion_tokens"] < 2000
    assert record["msg"].endswith(" client disconnected")


def test_probes_are_not_logged_at_info(json_server: Server) -> None:
    for path in ("/health", "/metrics", "/live"):
        r = httpx.get(json_server.url + path, timeout=TIMEOUT_S)
        assert r.status_code == 200
        rid = r.headers["x-request-id"]
        later = httpx.get(json_server.url + "/v1/models", timeout=TIMEOUT_S)
        access_records(json_server, later.headers["x-request-id"])
        assert not [r for r in records(json_server) if r.get("request_id") == rid]


def test_every_line_is_a_json_record(json_server: Server) -> None:
    httpx.post(json_server.v1 + "/chat/completions", json=CHAT, timeout=TIMEOUT_S)
    found = records(json_server)  # fails on a line that is not JSON
    assert len(found) >= 3  # uvicorn's startup lines, the announcement, the chat
    for record in found:
        assert {"ts", "level", "logger", "msg"} <= set(record), record
        assert record["ts"].endswith("Z")
        assert datetime.fromisoformat(record["ts"].removesuffix("Z") + "+00:00")
        assert record["level"] in ("debug", "info", "warning", "error", "critical")
    announced = [r for r in found if r["msg"].startswith("serving 'echo' on ")]
    assert len(announced) == 1 and announced[0]["url"] == json_server.v1
    assert [r for r in found if r["logger"].startswith("uvicorn")]  # uvicorn's lines too
    # ... but not its access log, which would say the same again
    assert not [r for r in found if r["logger"] == "uvicorn.access" or "HTTP/1.1" in r["msg"]]


def test_text_lines_read_at_a_glance_and_probes_log_at_debug() -> None:
    with rotor_server("--log-level", "debug") as srv:
        r = httpx.post(
            srv.v1 + "/chat/completions",
            json=CHAT,
            headers={"x-request-id": "text-1"},
            timeout=TIMEOUT_S,
        )
        assert r.status_code == 200
        usage = r.json()["usage"]
        httpx.get(srv.url + "/health", headers={"x-request-id": "probe-1"}, timeout=TIMEOUT_S)
        line = f"POST /v1/chat/completions 200 model=echo prompt_tokens={usage['prompt_tokens']} "
        pattern = (
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO rotor\.access: "
            + re.escape(line)
            + r"completion_tokens=\d+ duration_ms=\d+\.\d request_id=text-1"
        )
        probe = r" DEBUG rotor\.access: GET /health 200 duration_ms=\d+\.\d request_id=probe-1$"
        wait_for(
            "the request's and the probe's lines",
            lambda: bool(re.search(pattern, srv.log, re.M) and re.search(probe, srv.log, re.M)),
            TIMEOUT_S,
            detail=lambda: srv.log,
        )
        assert len(re.findall(pattern, srv.log, re.M)) == 1, srv.log
        assert "HTTP/1.1" not in srv.log  # uvicorn's own access line stays off
        # the request's path quoted when it could split the line
        r = httpx.get(srv.url + "/a%20b%0Aforged", timeout=TIMEOUT_S)
        assert r.status_code == 404
        quoted = 'GET "/a b\\nforged" 404 duration_ms='
        wait_for("the quoted path's line", lambda: quoted in srv.log, TIMEOUT_S, lambda: srv.log)


def test_no_access_line_below_warning() -> None:
    with rotor_server("--log-level", "warning") as srv:
        r = httpx.post(srv.v1 + "/chat/completions", json=CHAT, timeout=TIMEOUT_S)
        assert r.status_code == 200
        r = httpx.post(srv.v1 + "/chat/completions", json={**CHAT, "bogus": 1}, timeout=TIMEOUT_S)
        assert r.status_code == 400
        srv.process.terminate()  # every line it would write is written once it exited
        srv.process.wait(TIMEOUT_S)
        assert r.headers["x-request-id"] not in srv.log
        assert "rotor.access" not in srv.log
        assert srv.log.startswith("rotor: serving 'echo' on ")


def test_http_worker_processes_write_json_records_too() -> None:
    with rotor_server("--http-workers", "2", "--log-level", "info", "--log-format", "json") as srv:
        for _ in range(4):  # the kernel spreads connections over both processes
            r = httpx.post(srv.v1 + "/chat/completions", json=CHAT, timeout=TIMEOUT_S)
            assert r.status_code == 200
            record = only_record(srv, r.headers["x-request-id"])
            check_usage(record, r.json()["usage"])
        assert [r for r in records(srv) if r["msg"].startswith("serving 'echo' on ")]


def test_a_frontend_and_its_worker_write_json_records() -> None:
    from support.cluster import nats_server, start_frontend, start_worker

    json_args = ("--log-level", "info", "--log-format", "json")
    with nats_server() as nats:
        worker = start_worker(nats, "out=mocker", *json_args, system=True)
        frontend = start_frontend(nats, *json_args)
        try:
            frontend.wait_workers("mock-model", {worker.id})
            body = {"messages": CHAT["messages"], "mock": {"output": "from a worker"}}
            r = httpx.post(frontend.v1 + "/chat/completions", json=body, timeout=TIMEOUT_S)
            assert r.status_code == 200, r.text
            record = only_record(frontend, r.headers["x-request-id"])
            assert (record["model"], record["status"]) == ("mock-model", 200)
            check_usage(record, r.json()["usage"])
            assert httpx.get(worker.system_url + "/health", timeout=TIMEOUT_S).status_code == 200
            worker.proc.terminate()
            worker.proc.process.wait(TIMEOUT_S)
            lines = worker.proc.text().splitlines()
            said = [json.loads(line)["msg"] for line in lines]  # fails on a line not JSON
            assert f"worker {worker.id} serves 'mock-model' on {nats.url}" in said
            assert f"worker {worker.id} is leaving" in said
        finally:
            frontend.proc.stop()
            worker.proc.stop()
