"""`rotor run` (echo engine) end to end with the official openai SDK and raw HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from support.server import Server, rotor_server
from support.wait import wait_for


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server() as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


def chat(client: openai.OpenAI, text: str, **kw):
    return client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": text}], **kw
    )


def stream_text(client: openai.OpenAI, text: str, **kw) -> tuple[str, list]:
    chunks = list(chat(client, text, stream=True, **kw))
    body = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return body, chunks


def test_non_streaming_echoes_the_last_user_message(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model="echo",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "Grüße, 東京 🙂!"},
        ],
    )
    choice = resp.choices[0]
    assert choice.message.content == "Grüße, 東京 🙂!"
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "stop"
    assert resp.id.startswith("chatcmpl-")
    assert resp.usage.completion_tokens == len("Grüße, 東京 🙂!")


def test_streaming_echoes_one_character_per_chunk(client: openai.OpenAI) -> None:
    body, chunks = stream_text(client, "héllo 🙂")
    assert body == "héllo 🙂"
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert [c.choices[0].delta.content for c in content_chunks] == list("héllo 🙂")
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]
    assert len({c.id for c in chunks}) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_cuts_before_its_match(client: openai.OpenAI, stream: bool) -> None:
    # "o w" spans three one-character tokens.
    if stream:
        body, chunks = stream_text(client, "hello world", stop=["o w"])
        last = [c for c in chunks if c.choices and c.choices[0].finish_reason][-1]
        assert last.choices[0].finish_reason == "stop"
        assert last.choices[0].model_extra.get("stop_reason") == "o w"
    else:
        resp = chat(client, "hello world", stop=["o w"])
        body = resp.choices[0].message.content
        assert resp.choices[0].finish_reason == "stop"
        assert resp.choices[0].model_extra.get("stop_reason") == "o w"
    assert body == "hell"


def test_stop_string_partial_match_is_released(client: openai.OpenAI) -> None:
    body, _ = stream_text(client, "abcabd", stop=["abe"])
    assert body == "abcabd"


def test_include_stop_str_in_output(client: openai.OpenAI) -> None:
    resp = chat(client, "one, two", stop=[","], extra_body={"include_stop_str_in_output": True})
    assert resp.choices[0].message.content == "one,"


@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_gives_length(client: openai.OpenAI, stream: bool) -> None:
    if stream:
        body, chunks = stream_text(client, "abcdefghij", max_tokens=5)
        finish = [
            c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
        ]
        assert finish == ["length"]
    else:
        resp = chat(client, "abcdefghij", max_tokens=5)
        body = resp.choices[0].message.content
        assert resp.choices[0].finish_reason == "length"
        assert resp.usage.completion_tokens == 5
    assert body == "abcde"


def test_max_completion_tokens_wins(client: openai.OpenAI) -> None:
    resp = chat(client, "abcdefghij", max_tokens=8, max_completion_tokens=3)
    assert resp.choices[0].message.content == "abc"


def test_n_fans_out_into_independent_choices(client: openai.OpenAI) -> None:
    resp = chat(client, "xyz", n=2, max_tokens=2)
    assert [c.index for c in resp.choices] == [0, 1]
    assert [c.message.content for c in resp.choices] == ["xy", "xy"]
    assert resp.usage.completion_tokens == 4
    chunks = list(chat(client, "xyz", n=3, stream=True))
    per_choice = {i: "" for i in range(3)}
    for c in chunks:
        for ch in c.choices:
            per_choice[ch.index] += ch.delta.content or ""
    assert per_choice == {0: "xyz", 1: "xyz", 2: "xyz"}


def test_usage_counts_and_stream_usage_options(client: openai.OpenAI) -> None:
    resp = chat(client, "count me")
    assert resp.usage.prompt_tokens == len("count me")
    assert resp.usage.completion_tokens == len("count me")
    assert resp.usage.total_tokens == 2 * len("count me")
    chunks = list(chat(client, "abc", stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 3
    assert all(c.usage is None for c in chunks[:-1])
    chunks = list(
        chat(
            client,
            "abc",
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        )
    )
    running = [c.usage.completion_tokens for c in chunks if c.choices]
    assert running == sorted(running) and running[-1] == 3


def test_completions_echo_the_prompt(client: openai.OpenAI) -> None:
    resp = client.completions.create(model="echo", prompt="tell me")
    assert resp.choices[0].text == "tell me"
    assert resp.choices[0].finish_reason == "stop"
    resp = client.completions.create(model="echo", prompt=["ab", "cde"], max_tokens=3)
    assert [c.text for c in resp.choices] == ["ab", "cde"]
    # "cde" reaches max_tokens before the engine's EOS: the frontend's length wins.
    assert [c.finish_reason for c in resp.choices] == ["stop", "length"]
    text = "".join(
        c.choices[0].text
        for c in client.completions.create(model="echo", prompt="strm", stream=True)
    )
    assert text == "strm"


def test_models_and_model(client: openai.OpenAI, server: Server) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["echo"]
    assert models.data[0].owned_by == "rotor"
    assert client.models.retrieve("echo").id == "echo"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


# -- errors ------------------------------------------------------------------------------


# (body fields, the `param` sent back, a word the message must name)
BAD_REQUESTS = [
    ({"messages": []}, "messages", "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages", "role"),
    ({"temperature": 3}, "temperature", "temperature"),
    ({"top_p": 0}, "top_p", "top_p"),
    ({"max_tokens": 0}, "max_tokens", "max_tokens"),
    ({"n": 17}, "n", "n"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "stop"),
    ({"stop": [""]}, "stop", "stop"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "top_logprobs"),
    ({"logprobs": True}, "logprobs", "logprobs"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "stream_options"),
    ({"tool_choice": "required"}, "tool_choice", "tool_choice"),
    ({"bogus_field": 1}, "bogus_field", "bogus_field"),
    ({"mock": {"output": "x"}}, "mock", "mock"),
]


@pytest.mark.parametrize(
    ("extra", "param", "word"),
    BAD_REQUESTS,
    ids=[f"{word}-{i}" for i, (_, _, word) in enumerate(BAD_REQUESTS)],
)
def test_bad_requests_are_400_naming_the_field(
    client: openai.OpenAI, extra: dict[str, Any], param: str, word: str
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        chat(client, "hi", extra_body=extra)
    assert err.value.status_code == 400
    assert err.value.body["param"] == param, err.value.body
    assert word in err.value.body["message"], err.value.body


def test_context_length_error_names_both_numbers() -> None:
    with rotor_server("--max-model-len", "20") as srv:
        client = srv.openai()
        with pytest.raises(openai.BadRequestError) as err:
            chat(client, "0123456789", max_tokens=15)
        assert "20" in str(err.value) and "25" in str(err.value)


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])


def test_raw_http_errors(server: Server) -> None:
    r = httpx.post(server.v1 + "/chat/completions", content=b"{not json", timeout=5)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.get(server.v1 + "/chat/completions", timeout=5)
    assert r.status_code == 405 and r.json()["error"]["code"] == 405
    r = httpx.get(server.v1 + "/nowhere", timeout=5)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    big = b'{"messages": [{"role": "user", "content": "' + b"x" * (33 * 1024 * 1024) + b'"}]}'
    r = httpx.post(server.v1 + "/chat/completions", content=big, timeout=30)
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]


def test_api_key() -> None:
    with rotor_server("--api-key", "sekret") as srv:
        bad = srv.openai(api_key="wrong")
        with pytest.raises(openai.AuthenticationError):
            chat(bad, "x")
        good = srv.openai(api_key="sekret")
        assert chat(good, "ok").choices[0].message.content == "ok"
        assert httpx.get(srv.url + "/health", timeout=5).status_code == 200
        assert httpx.get(srv.url + "/metrics", timeout=5).status_code == 200


def test_request_id_is_echoed(server: Server) -> None:
    body = {"model": "echo", "messages": [{"role": "user", "content": "id"}]}
    r = httpx.post(
        server.v1 + "/chat/completions", json=body, headers={"x-request-id": "abc-123"}, timeout=5
    )
    assert r.headers["x-request-id"] == "abc-123"
    assert r.json()["id"] == "chatcmpl-abc-123"
    r = httpx.post(server.v1 + "/chat/completions", json=body, timeout=5)
    assert r.headers["x-request-id"] and r.json()["id"] == "chatcmpl-" + r.headers["x-request-id"]


def test_operational_routes(server: Server) -> None:
    health = httpx.get(server.url + "/health", timeout=5)
    assert health.status_code == 200 and health.json()["models"] == ["echo"]
    assert httpx.get(server.url + "/live", timeout=5).status_code == 200
    assert (
        "/v1/chat/completions" in httpx.get(server.url + "/openapi.json", timeout=5).json()["paths"]
    )
    assert httpx.get(server.url + "/docs", timeout=5).status_code == 200


def test_metrics_move_when_requests_run(client: openai.OpenAI, server: Server) -> None:
    before = server.metric("rotor_requests_total", 'endpoint="chat"')
    tokens_before = server.metric("rotor_completion_tokens_total")
    ttft_before = server.metric("rotor_time_to_first_token_seconds_count")
    durations_before = server.metric("rotor_request_duration_seconds_count")
    chat(client, "metric")
    list(chat(client, "metric", stream=True))
    assert server.metric("rotor_requests_total", 'endpoint="chat"') == before + 2
    assert server.metric("rotor_completion_tokens_total") == tokens_before + 12
    # both requests timed, streamed or not (other tests of the module move these too)
    assert server.metric("rotor_time_to_first_token_seconds_count") == ttft_before + 2
    assert server.metric("rotor_request_duration_seconds_count") == durations_before + 2


# -- disconnect -----------------------------------------------------------------------------

PROBE = "p" * 30  # 300 ms at 10 ms per token: an engine still running on would make ~30 more


def tokens_once_idle(srv: Server) -> float:
    """The engine's token count once it let go of the request, checked by a
    request answered afterwards: meanwhile the engine made its tokens and no
    others (it ran, and nothing of the request left behind ran with it)."""
    wait_for(
        "the engine to let go of the request",
        lambda: srv.metric("rotor_engine_active_requests") == 0,
    )
    produced = srv.metric("rotor_engine_generated_tokens_total")
    probe = {"model": "echo", "messages": [{"role": "user", "content": PROBE}]}
    r = httpx.post(srv.v1 + "/chat/completions", json=probe, timeout=10)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == PROBE
    assert srv.metric("rotor_engine_generated_tokens_total") == produced + len(PROBE)
    return produced


def test_client_disconnect_stops_the_engine() -> None:
    text = "x" * 2000  # 20 s of output at 10 ms per token
    with rotor_server(env={"ROTOR_ECHO_DELAY_MS": "10"}) as srv:
        body = {"model": "echo", "messages": [{"role": "user", "content": text}], "stream": True}
        with (
            httpx.Client(timeout=10) as http,
            http.stream("POST", srv.v1 + "/chat/completions", json=body) as r,
        ):
            lines = r.iter_lines()  # kept alive: dropping it would close the connection
            seen = 0
            while seen < 5:
                seen += next(lines).startswith("data: ")
            assert srv.metric("rotor_engine_active_requests") == 1
            assert srv.metric("rotor_disconnected_clients_total") == 0
        # The connection is closed: the engine must stop producing at once.
        produced = tokens_once_idle(srv)
        assert produced < 1000
        assert srv.metric("rotor_disconnected_clients_total") == 1


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
def test_non_streaming_client_disconnect_stops_the_engine(path: str) -> None:
    text = "y" * 2000  # 20 s of output at 10 ms per token
    body = (
        {"model": "echo", "messages": [{"role": "user", "content": text}]}
        if path == "/chat/completions"
        else {"model": "echo", "prompt": text}
    )
    with rotor_server(env={"ROTOR_ECHO_DELAY_MS": "10"}) as srv:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and hangs up
            httpx.post(srv.v1 + path, json=body, timeout=httpx.Timeout(5, read=0.5))
        assert tokens_once_idle(srv) < 1000
        assert srv.metric("rotor_disconnected_clients_total") == 1
