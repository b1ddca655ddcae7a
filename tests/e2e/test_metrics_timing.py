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


class Moved:
    """What one test's requests add to the module server's samples: every
    test of the module moves the same counters, in any order."""

    def __init__(self, server: Server, *samples: tuple[str, str]) -> None:
        self.server = server
        self.before = {sample: server.metric(*sample) for sample in samples}

    def __call__(self, name: str, labels: str = "") -> float:
        return self.server.metric(name, labels) - self.before[name, labels]


def test_ttft_and_itl_time_generated_tokens(server: Server) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    names = ("time_to_first_token", "inter_token_latency")
    moved = Moved(
        server, *((f"rotor_{n}_seconds_{part}", "") for n in names for part in ("count", "sum"))
    )
    r = httpx.post(server.v1 + "/chat/completions", json=body, timeout=10)
    assert r.status_code == 200
    assert moved("rotor_time_to_first_token_seconds_count") == 1
    # The first character comes one delay after the request: the opening chunk came at once.
    assert moved("rotor_time_to_first_token_seconds_sum") >= 0.75 * DELAY_S
    # Two tokens ("h", "i"): one gap between them; the finish and usage chunks are not tokens.
    assert moved("rotor_inter_token_latency_seconds_count") == 1
    assert moved("rotor_inter_token_latency_seconds_sum") >= 0.75 * DELAY_S


def test_an_unknown_model_is_labelled_unknown(server: Server) -> None:
    name = "no-such-model-7f3a"
    body = {"model": name, "messages": [{"role": "user", "content": "x"}]}
    unknown, not_found = (
        ("rotor_requests_total", 'model="unknown"'),
        ("rotor_requests_total", 'status="404"'),
    )
    moved = Moved(server, unknown, not_found)
    r = httpx.post(server.v1 + "/chat/completions", json=body, timeout=10)
    assert r.status_code == 404
    text = httpx.get(server.url + "/metrics", timeout=5).text
    assert name not in text
    assert moved(*unknown) == 1
    assert moved(*not_found) == 1


def test_non_streaming_requests_time_their_first_token_too(server: Server) -> None:
    before = server.metric("rotor_time_to_first_token_seconds_count")
    body = {"messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(server.v1 + "/chat/completions", json=body, timeout=10)
    assert r.status_code == 200
    assert server.metric("rotor_time_to_first_token_seconds_count") == before + 1


def test_label_values_are_lowercase(server: Server) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
    served = ("rotor_requests_total", 'status="200",stream="true"')
    moved = Moved(server, served)
    assert httpx.post(server.v1 + "/chat/completions", json=body, timeout=10).status_code == 200
    assert moved(*served) == 1  # counted under the lowercase label
    assert server.metric("rotor_requests_total", 'stream="True"') == 0


@pytest.mark.parametrize("stream", [True, False])
def test_refused_requests_are_labelled_lowercase_too(server: Server, stream: bool) -> None:
    """The error paths (unknown model, a 400) label `stream` as the served ones do."""
    value = "true" if stream else "false"
    # labels are written in name order: status, then stream
    refused = [("rotor_requests_total", f'status="{s}",stream="{value}"') for s in ("404", "400")]
    moved = Moved(server, *refused)
    for body in (
        {"model": "no-such-model-9c1d", "messages": [{"role": "user", "content": "x"}]},
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 10**9},  # over the context
    ):
        r = httpx.post(server.v1 + "/chat/completions", json={**body, "stream": stream}, timeout=10)
        assert r.status_code in (400, 404), r.text
    text = httpx.get(server.url + "/metrics", timeout=5).text
    assert 'stream="True"' not in text and 'stream="False"' not in text
    for sample in refused:
        assert moved(*sample) == 1, sample
