"""`--request-log FILE` for real: `rotor run out=mocker` writes one JSON line
per finished generating request — chat, completions, Anthropic messages,
Responses; streamed or not; refused; a client gone mid-stream (499) — whose
token counts are the response's usage, whose times are the stream's own
(TTFT ≤ E2E, ITL p50 ≤ max), and with `--request-log-hashes` the prompt's KV
block hashes exactly as rotor's hash function gives them for the prompt's
token ids (prompts sharing a system prompt share their leading hashes). A
`.gz` log is rotated at `--request-log-max-bytes` into whole gzip files; an
unwritable path serves every request and counts the records it drops; a
frontend over NATS records the worker that served, and each migration."""

from __future__ import annotations

import gzip
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from rotor.protocol.kv import block_hashes

from support.cluster import nats_server, start_frontend, start_worker
from support.server import Server, rotor_server
from support.wait import wait_for

TIMEOUT_S = 30
MODEL = "mock-model"
BLOCK = 16  # the mocker's default --block-size
SYSTEM = "You answer questions about rivers. " + " ".join(f"river-{i}." for i in range(80))


@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("request-log") / "requests.jsonl"


@pytest.fixture(scope="module")
def server(log_path: Path) -> Iterator[Server]:
    # --speedup-ratio 1: a decode step takes 10 ms, so streams have gaps to time
    with rotor_server("out=mocker", "--request-log", str(log_path), "--request-log-hashes") as srv:
        yield srv


def lines(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes() if path.exists() else b""
    return [orjson.loads(line) for line in data.splitlines()]


def record_of(path: Path, rid: str) -> dict[str, Any]:
    """The one record of request `rid`, once the writer flushed it."""
    found: list[dict[str, Any]] = []

    def written() -> bool:
        found[:] = [r for r in lines(path) if r["request_id"] == rid]
        return bool(found)

    wait_for(f"the request log's record of {rid}", written, TIMEOUT_S)
    assert len(found) == 1, found
    return found[0]


def new_id() -> str:
    return f"rl-{uuid.uuid4().hex}"


def check_times(rec: dict[str, Any], before: float, after: float) -> None:
    assert before - 0.01 <= rec["arrival"] <= after
    assert 0 < rec["ttft_s"] <= rec["e2e_s"] <= after - before + 0.01
    if "itl_p50_s" in rec:  # two events or more brought text
        assert 0 < rec["itl_p50_s"] <= rec["itl_max_s"] <= rec["e2e_s"]


def check_hashes(srv: Server, rec: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    """The record's hashes are the kv router's of the prompt chat renders."""
    ids = srv.tokenize(messages=messages, model=MODEL)
    assert rec["block_size"] == BLOCK
    assert rec["block_hashes"] == block_hashes(ids, BLOCK)
    assert len(rec["block_hashes"]) == len(ids) // BLOCK == rec["prompt_tokens"] // BLOCK


def test_a_chat_not_streamed(server: Server, log_path: Path) -> None:
    messages = [{"role": "user", "content": "Where does the Danube rise?"}]
    rid = new_id()
    before = time.time()
    resp = server.openai().chat.completions.create(
        model=MODEL, messages=messages, max_tokens=12, extra_headers={"x-request-id": rid}
    )
    after = time.time()
    rec = record_of(log_path, rid)
    assert resp.usage is not None
    assert (rec["route"], rec["model"], rec["status"], rec["stream"]) == (
        "/v1/chat/completions",
        MODEL,
        200,
        False,
    )
    assert rec["prompt_tokens"] == resp.usage.prompt_tokens > 0
    assert rec["completion_tokens"] == resp.usage.completion_tokens > 0
    assert rec["cached_tokens"] == resp.usage.prompt_tokens_details.cached_tokens
    assert rec["finish_reasons"] == [resp.choices[0].finish_reason]
    assert "worker" not in rec  # one process: nothing was routed
    check_times(rec, before, after)
    check_hashes(server, rec, messages)
    assert "Danube" not in log_path.read_text()  # never the text


def test_a_chat_streamed_keeps_its_gaps(server: Server, log_path: Path) -> None:
    messages = [{"role": "user", "content": "Name a long river."}]
    rid = new_id()
    before = time.time()
    stream = server.openai().chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
        extra_headers={"x-request-id": rid},
    )
    chunks = list(stream)
    after = time.time()
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 20
    rec = record_of(log_path, rid)
    assert (rec["status"], rec["stream"], rec["finish_reasons"]) == (200, True, ["length"])
    assert rec["prompt_tokens"] == usage.prompt_tokens
    assert rec["completion_tokens"] == 20
    check_times(rec, before, after)
    assert rec["itl_p50_s"] >= 0.002  # the mocker's 10 ms decode steps, as the stream had them
    assert rec["itl_max_s"] >= rec["itl_p50_s"]
    check_hashes(server, rec, messages)


def test_completions_messages_and_responses(server: Server, log_path: Path) -> None:
    ids = [new_id() for _ in range(3)]
    client = server.openai()
    done = client.completions.create(
        model=MODEL, prompt="rivers of europe", max_tokens=6, extra_headers={"x-request-id": ids[0]}
    )
    msg = server.anthropic().messages.create(
        model=MODEL,
        max_tokens=6,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-request-id": ids[1]},
    )
    answer = client.responses.create(
        model=MODEL, input="hello", max_output_tokens=6, extra_headers={"x-request-id": ids[2]}
    )
    recs = [record_of(log_path, rid) for rid in ids]
    assert [r["route"] for r in recs] == ["/v1/completions", "/v1/messages", "/v1/responses"]
    assert all(r["status"] == 200 and r["stream"] is False for r in recs)
    assert done.usage is not None and answer.usage is not None
    assert (recs[0]["prompt_tokens"], recs[0]["completion_tokens"]) == (
        done.usage.prompt_tokens,
        done.usage.completion_tokens,
    )
    cached = msg.usage.cache_read_input_tokens or 0
    assert recs[1]["prompt_tokens"] == msg.usage.input_tokens + cached
    assert recs[1]["completion_tokens"] == msg.usage.output_tokens
    assert (recs[2]["prompt_tokens"], recs[2]["completion_tokens"]) == (
        answer.usage.input_tokens,
        answer.usage.output_tokens,
    )


def test_refused_requests_say_their_status(server: Server, log_path: Path) -> None:
    unknown, bad = new_id(), new_id()
    client = server.openai()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="no-such-model",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-request-id": unknown},
        )
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=-1,
            stream=True,
            extra_headers={"x-request-id": bad},
        )
    a, b = record_of(log_path, unknown), record_of(log_path, bad)
    assert (a["status"], a["model"], a["stream"]) == (404, "no-such-model", False)
    assert (b["status"], b["model"], b["stream"]) == (400, MODEL, True)
    for rec in (a, b):
        assert "prompt_tokens" not in rec and "block_hashes" not in rec
        assert rec["e2e_s"] >= 0


def test_a_client_gone_mid_stream_is_a_499(server: Server, log_path: Path) -> None:
    rid = new_id()
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "tell me everything"}],
        "max_tokens": 3000,  # 30 s at 10 ms a token: it is still running when we leave
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream(
        "POST",
        server.v1 + "/chat/completions",
        json=body,
        headers={"x-request-id": rid},
        timeout=TIMEOUT_S,
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {") and orjson.loads(line[6:])["choices"][0]["delta"].get(
                "content"
            ):
                break  # a token's text seen: leave
    rec = record_of(log_path, rid)
    assert rec["status"] == 499
    assert 1 <= rec["completion_tokens"] < 3000
    assert rec["finish_reasons"] == ["cancelled"]
    assert rec["ttft_s"] <= rec["e2e_s"] < 20


def test_a_shared_system_prompt_shares_leading_hashes(server: Server, log_path: Path) -> None:
    client = server.openai()
    asked = []
    for question in ("Which is longer, the Nile or the Amazon?", "Is the Rhine navigable?"):
        rid = new_id()
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=2, extra_headers={"x-request-id": rid}
        )
        asked.append((record_of(log_path, rid), messages))
    (first, m1), (second, m2) = asked
    check_hashes(server, first, m1)
    check_hashes(server, second, m2)
    system_ids = server.tokenize(messages=[{"role": "system", "content": SYSTEM}], model=MODEL)
    shared = len(system_ids) // BLOCK - 1  # the template's generation prompt follows the system's
    assert shared >= 10
    assert first["block_hashes"][:shared] == second["block_hashes"][:shared]
    assert first["block_hashes"][-1] != second["block_hashes"][-1]
    assert second["cached_tokens"] >= shared * BLOCK  # the mocker's prefix cache saw it too


def test_nothing_dropped_and_probes_not_logged(server: Server, log_path: Path) -> None:
    httpx.get(server.url + "/health", timeout=TIMEOUT_S)
    server.tokenize(text="not a generating request", model=MODEL)
    assert server.metric("rotor_request_log_dropped_total") == 0
    routes = {r["route"] for r in lines(log_path)}
    assert routes <= {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"}


def test_gzip_log_rotates_into_whole_files(tmp_path: Path) -> None:
    """Records of ~300 bytes, 1000 at most a file: the log rotates, every
    file is a whole gzip file once the server stopped (SIGTERM), and the
    newest four files hold the newest records, in order."""
    path = tmp_path / "requests.jsonl.gz"
    sent = []
    with rotor_server(
        "out=mocker",
        "--speedup-ratio",
        "0",
        "--request-log",
        str(path),
        "--request-log-max-bytes",
        "1000",
    ) as srv:
        client = srv.openai()
        for i in range(12):
            rid = new_id()
            client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"question {i}"}],
                max_tokens=3,
                extra_headers={"x-request-id": rid},
            )
            sent.append(rid)
        wait_for("a rotation", lambda: (tmp_path / "requests.jsonl.gz.1").exists(), TIMEOUT_S)
    files = [tmp_path / f"requests.jsonl.gz.{k}" for k in (3, 2, 1)] + [path]
    kept = [f for f in files if f.exists()]
    assert len(kept) >= 2 and {p.name for p in tmp_path.iterdir()} <= {p.name for p in files}
    got = []
    for f in kept:
        data = gzip.decompress(f.read_bytes())  # whole: it raises on a file cut short
        assert 0 < len(data) <= 1000
        got += [orjson.loads(line)["request_id"] for line in data.splitlines()]
    assert got == sent[-len(got) :]  # the oldest went with the fifth file, if there was one
    assert len(got) >= 4


def test_an_unwritable_log_never_fails_a_request(tmp_path: Path) -> None:
    """A directory where the file should be: requests are served, the drops
    counted in /metrics, and said once in the server's log."""
    path = tmp_path / "a-directory"
    path.mkdir()
    with rotor_server("out=mocker", "--speedup-ratio", "0", "--request-log", str(path)) as srv:
        client = srv.openai()
        for _ in range(3):
            resp = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            assert resp.choices[0].finish_reason
        wait_for(
            "the dropped records counted",
            lambda: srv.metric("rotor_request_log_dropped_total") == 3,
            TIMEOUT_S,
        )
        assert srv.log.count("dropping records") == 1, srv.log
    assert list(path.iterdir()) == []


def test_a_frontend_over_nats_records_its_workers_and_migrations(tmp_path: Path) -> None:
    """The worker that served and, when one is killed mid-stream (SIGKILL),
    the migration: its cause and the worker the answer moved to."""
    path = tmp_path / "frontend.jsonl"
    story = " ".join(f"word{i}" for i in range(40))
    with nats_server() as nats:
        # --speedup-ratio 1: 10 ms a decode step, time to kill a worker midway
        workers = {w.id: w for w in (start_worker(nats, "out=mocker") for _ in range(2))}
        frontend = start_frontend(
            nats, "--router", "kv", "--request-log", str(path), "--request-log-hashes"
        )
        try:
            frontend.wait_workers(MODEL, set(workers))
            rid = new_id()
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
            resp = frontend.openai().chat.completions.with_raw_response.create(
                model=MODEL, messages=messages, max_tokens=3, extra_headers={"x-request-id": rid}
            )
            rec = record_of(path, rid)
            assert rec["worker"] == resp.headers["x-rotor-worker"] and rec["worker"] in workers
            assert rec["migrations"] == []
            assert rec["kv_overlap_blocks"] == int(resp.headers["x-rotor-kv-overlap"])
            assert rec["completion_tokens"] == resp.parse().usage.completion_tokens
            assert rec["block_hashes"] == block_hashes(frontend.tokenize(messages=messages), BLOCK)

            rid = new_id()
            body = {"model": MODEL, "messages": messages, "stream": True, "max_tokens": 500}
            body["mock"] = {"output": story}
            text, killed = [], None
            with httpx.stream(
                "POST",
                frontend.v1 + "/chat/completions",
                json=body,
                headers={"x-request-id": rid},
                timeout=60,
            ) as r:
                assert r.status_code == 200, r.read()
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        text += [
                            c["delta"].get("content") or ""
                            for c in orjson.loads(line[6:])["choices"]
                        ]
                    if killed is None and len("".join(text)) > 60:
                        killed = r.headers["x-rotor-worker"]
                        workers[killed].proc.kill()
            assert killed is not None and "".join(text) == story
            rec = record_of(path, rid)
            (survivor,) = set(workers) - {killed}
            assert rec["worker"] == killed and rec["status"] == 200
            [move] = rec["migrations"]
            assert move["worker"] == survivor
            assert move["cause"] in {"worker_gone", "timeout", "unavailable"}
            assert rec["finish_reasons"] == ["stop"]
        finally:
            frontend.proc.stop()
            for w in workers.values():
                w.proc.stop()


def test_each_http_process_writes_its_own_file(tmp_path: Path) -> None:
    """`--http-workers 2`: requests-0.jsonl and requests-1.jsonl, opened at
    startup, hold every request once between them; no process writes FILE."""
    path = tmp_path / "requests.jsonl"
    sent = []
    with rotor_server(
        "out=mocker", "--speedup-ratio", "0", "--http-workers", "2", "--request-log", str(path)
    ) as srv:
        mine = [tmp_path / "requests-0.jsonl", tmp_path / "requests-1.jsonl"]
        wait_for("both processes' files", lambda: all(p.exists() for p in mine), TIMEOUT_S)
        for _ in range(8):
            with httpx.Client(timeout=TIMEOUT_S) as fresh:  # a new connection: either process
                rid = new_id()
                body = {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 2,
                }
                r = fresh.post(
                    srv.v1 + "/chat/completions", json=body, headers={"x-request-id": rid}
                )
                assert r.status_code == 200, r.text
                sent.append(rid)

        def all_there() -> bool:
            return sorted(r["request_id"] for p in mine for r in lines(p)) == sorted(sent)

        wait_for("every request in one of the files", all_there, TIMEOUT_S)
    assert not path.exists()
