"""What the latency metrics time, and which labels a client can choose.

TTFT is the time to the first generated token, not to the opening `role`
chunk (written before the engine runs); inter-token latency is timed between
tokens, not between a token and its finish or usage chunk.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from support.server import Server, rotor_server

DELAY_S = 0.2  # the echo's pace: one character every 200 ms


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server(env={"ROTOR_ECHO_DELAY_MS": str(int(DELAY_S * 1000))}) as srv:
        yield srv


def test_ttft_and_itl_time_generated_tokens(server: Server) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r = httpx.post(server.v1 + "/chat/completions", json=body, timeout=10)
    assert r.status_code == 200
    assert server.metric("rotor_time_to_first_token_seconds_count") == 1
    # The first character comes one delay after the request: the opening chunk came at once.
    assert server.metric("rotor_time_to_first_token_seconds_sum") >= 0.75 * DELAY_S
    # Two tokens ("h", "i"): one gap between them; the finish and usage chunks are not tokens.
    assert server.metric("rotor_inter_token_latency_seconds_count") == 1
    assert server.metric("rotor_inter_token_latency_seconds_sum") >= 0.75 * DELAY_S


def test_an_unknown_model_is_labelled_unknown(server: Server) -> None:
    name = "no-such-model-7f3a"
    body = {"model": name, "messages": [{"role": "user", "content": "x"}]}
    r = httpx.post(server.v1 + "/chat/completions", json=body, timeout=10)
    assert r.status_code == 404
    text = httpx.get(server.url + "/metrics", timeout=5).text
    assert name not in text
    assert server.metric("rotor_requests_total", 'model="unknown"') == 1
    assert server.metric("rotor_requests_total", 'status="404"') == 1


def test_non_streaming_requests_time_their_first_token_too(server: Server) -> None:
    before = server.metric("rotor_time_to_first_token_seconds_count")
    body = {"messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(server.v1 + "/chat/completions", json=body, timeout=10)
    assert r.status_code == 200
    assert server.metric("rotor_time_to_first_token_seconds_count") == before + 1


def test_label_values_are_lowercase(server: Server) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
    assert httpx.post(server.v1 + "/chat/completions", json=body, timeout=10).status_code == 200
    assert server.metric("rotor_requests_total", 'stream="true"') >= 1
    assert server.metric("rotor_requests_total", 'stream="True"') == 0


@pytest.mark.parametrize("stream", [True, False])
def test_refused_requests_are_labelled_lowercase_too(server: Server, stream: bool) -> None:
    """The error paths (unknown model, a 400) label `stream` as the served ones do."""
    for body in (
        {"model": "no-such-model-9c1d", "messages": [{"role": "user", "content": "x"}]},
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 10**9},  # over the context
    ):
        r = httpx.post(server.v1 + "/chat/completions", json={**body, "stream": stream}, timeout=10)
        assert r.status_code in (400, 404), r.text
    text = httpx.get(server.url + "/metrics", timeout=5).text
    assert 'stream="True"' not in text and 'stream="False"' not in text
    value = "true" if stream else "false"
    for status in ("404", "400"):  # labels are written in name order: status, then stream
        labels = f'status="{status}",stream="{value}"'
        assert server.metric("rotor_requests_total", labels) >= 1, labels
