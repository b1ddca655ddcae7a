"""`rotor run out=mocker` end to end: the official openai SDK, prefix reuse,
preemption under a tiny KV cache, `--speedup-ratio`, seeds, logprobs, the
token routes and the `mock` request extension."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from support.server import Server, rotor_server

CONTEXT = 256  # the main server's --max-model-len
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0", "--max-model-len", str(CONTEXT)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


@pytest.fixture(scope="module")
def model(client: openai.OpenAI) -> str:
    (entry,) = client.models.list().data
    assert entry.model_extra["max_model_len"] == CONTEXT
    return entry.id


def mock(output: str | list[str], **more: Any) -> dict[str, Any]:
    return {"extra_body": {"mock": {"output": output, **more}}}


# -- the openai SDK ----------------------------------------------------------------------


def test_sdk_chat_non_streaming(server: Server, client: openai.OpenAI, model: str) -> None:
    resp = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=50, **mock("Grüße aus 東京 🙂")
    )
    (choice,) = resp.choices
    assert choice.message.role == "assistant"
    assert choice.message.content == "Grüße aus 東京 🙂"
    assert choice.finish_reason == "stop"
    assert resp.object == "chat.completion"
    assert resp.model == model
    assert resp.id.startswith("chatcmpl-")
    assert resp.usage.completion_tokens == len(server.tokenize("Grüße aus 東京 🙂")) + 1


def test_sdk_chat_streaming(client: openai.OpenAI, model: str) -> None:
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=MESSAGES,
            max_tokens=50,
            stream=True,
            stream_options={"include_usage": True},
            **mock("streamed, piece by piece"),
        )
    )
    assert len({c.id for c in chunks}) == 1
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed, piece by piece"
    assert [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_sdk_completions_every_prompt_shape(
    server: Server, client: openai.OpenAI, model: str, stream: bool
) -> None:
    hello = server.tokenize("hello there")
    prompts: list[Any] = [
        "one prompt",
        ["first", "second"],
        hello,
        [hello, server.tokenize("again")],
    ]
    for prompt in prompts:
        many = isinstance(prompt, list) and isinstance(prompt[0], (str, list))
        expected = len(prompt) if many else 1
        resp = client.completions.create(
            model=model, prompt=prompt, max_tokens=20, stream=stream, **mock("done here")
        )
        texts = [""] * expected
        finish: list[str | None] = [None] * expected
        for chunk in resp if stream else [resp]:
            assert chunk.object == "text_completion"
            for c in chunk.choices:
                texts[c.index] += c.text
                if c.finish_reason is not None:
                    assert finish[c.index] is None
                    finish[c.index] = c.finish_reason
        assert texts == ["done here"] * expected, prompt
        assert finish == ["stop"] * expected, prompt


def test_completions_token_id_prompt_counts_its_tokens(
    server: Server, client: openai.OpenAI, model: str
) -> None:
    ids = server.tokenize("hello there, friend")
    resp = client.completions.create(model=model, prompt=ids, max_tokens=5, **mock("x"))
    assert resp.usage.prompt_tokens == len(ids)
    resp = client.completions.create(model=model, prompt=[ids, ids[:2]], max_tokens=5, **mock("x"))
    assert resp.usage.prompt_tokens == len(ids) + 2
    assert resp.usage.completion_tokens == 2 * 2  # "x" and the EOS, for each prompt


# -- prefix reuse ---------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_prefix_reuse_shows_as_cached_tokens(
    client: openai.OpenAI, model: str, stream: bool
) -> None:
    # A fresh prefix (no block of it was ever computed) of well over one 16-token block.
    system = f"{uuid.uuid4().hex} " + "You are a careful assistant who answers briefly. " * 3
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "hello"}]

    def usage() -> Any:
        resp = client.chat.completions.create(
            model=model,
            messages=messages,
            max_tokens=5,
            stream=stream,
            **({"stream_options": {"include_usage": True}} if stream else {}),
            **mock("ok"),
        )
        return list(resp)[-1].usage if stream else resp.usage

    first, second = usage(), usage()
    assert first.prompt_tokens == second.prompt_tokens > 32
    cold = first.prompt_tokens_details.cached_tokens if first.prompt_tokens_details else 0
    assert not cold
    warm = second.prompt_tokens_details.cached_tokens
    assert second.prompt_tokens - 16 <= warm <= second.prompt_tokens
    assert warm > 0


def test_a_second_tenant_never_reports_the_first_tenant_s_cached_tokens(
    client: openai.OpenAI, model: str
) -> None:
    """cache_salt isolates tenants: the same prompt under another salt (or
    none) reports no cached tokens; under its own salt again, it is cached.
    The longest salt allowed (128 characters) is one."""
    system = f"{uuid.uuid4().hex} " + "You are a careful assistant who answers briefly. " * 3
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "hello"}]
    first, second = "tenant-a", "b" * 128

    def cached(salt: str | None, chat: bool = True) -> int:
        extra: dict[str, Any] = {"mock": {"output": "ok"}}
        if salt is not None:
            extra["cache_salt"] = salt
        if chat:
            resp: Any = client.chat.completions.create(
                model=model, messages=messages, max_tokens=5, extra_body=extra
            )
        else:
            resp = client.completions.create(
                model=model, prompt=system, max_tokens=5, extra_body=extra
            )
        details = resp.usage.prompt_tokens_details
        return details.cached_tokens if details else 0

    assert cached(first) == 0
    assert cached(second) == 0  # the second tenant: nothing of the first's
    assert cached(None) == 0  # nor an unsalted request
    assert cached(first) > 32  # the first tenant again: its own prompt is cached
    assert cached(second) > 32
    # completions are salted alike: the first tenant's prefix is not the second's
    assert cached(first, chat=False) == 0
    assert cached(second, chat=False) == 0
    assert cached(first, chat=False) > 32


# -- seeds, logprobs -----------------------------------------------------------------------


def test_seeded_random_output_is_reproducible(client: openai.OpenAI, model: str) -> None:
    def text(seed: int) -> tuple[str, int]:
        resp = client.completions.create(
            model=model, prompt="hi", max_tokens=12, seed=seed, extra_body={"ignore_eos": True}
        )
        return resp.choices[0].text, resp.usage.completion_tokens

    a, b, c = text(11), text(11), text(12)
    assert a == b
    assert a[1] == 12
    assert a != c


def test_chat_logprobs_are_well_formed(client: openai.OpenAI, model: str) -> None:
    resp = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=20,
        logprobs=True,
        top_logprobs=3,
        **mock("hello world, again"),
    )
    choice = resp.choices[0]
    entries = choice.logprobs.content
    assert choice.message.content == "hello world, again"
    # One entry per generated token, the terminating EOS included (as vLLM does):
    # the same tokens usage counts.
    assert "".join(e.token for e in entries) == "hello world, again<|im_end|>"
    assert len(entries) == resp.usage.completion_tokens
    _check_entries(entries, 3)

    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=MESSAGES,
            max_tokens=20,
            logprobs=True,
            top_logprobs=3,
            stream=True,
            **mock("hello world, again"),
        )
    )
    streamed = [
        e
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert [e.token for e in streamed] == [e.token for e in entries]
    _check_entries(streamed, 3)


def _check_entries(entries: list[Any], top: int) -> None:
    assert entries
    for e in entries:
        assert e.logprob <= 0.0
        assert e.bytes == list(e.token.encode())
        assert len(e.top_logprobs) == top
        values = [t.logprob for t in e.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert all(v <= 0.0 for v in values)
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob


def test_completion_logprobs_are_well_formed(client: openai.OpenAI, model: str) -> None:
    resp = client.completions.create(
        model=model, prompt="hi", max_tokens=20, logprobs=2, **mock("tokens and logprobs")
    )
    lp = resp.choices[0].logprobs
    assert resp.choices[0].text == "tokens and logprobs"
    assert "".join(lp.tokens) == "tokens and logprobs<|im_end|>"
    assert len(lp.tokens) == resp.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs)
    for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert value <= 0.0
        assert 1 <= len(top) <= 2
        assert top[token] == value


# -- token routes -------------------------------------------------------------------------


def test_tokenize_and_detokenize_shapes(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        body = http.post("/tokenize", json={"prompt": "hello world"}).json()
        assert set(body) == {"count", "max_model_len", "tokens"}
        assert body["count"] == len(body["tokens"]) > 0
        assert body["max_model_len"] == CONTEXT
        assert http.post("/detokenize", json={"tokens": body["tokens"]}).json() == {
            "prompt": "hello world"
        }

        chat = http.post("/tokenize", json={"messages": MESSAGES}).json()
        assert set(chat) == {"count", "max_model_len", "tokens"}
        rendered = http.post("/detokenize", json={"tokens": chat["tokens"]}).json()["prompt"]
        assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        # The chat route counts exactly these prompt tokens.
        resp = http.post(
            "/v1/chat/completions",
            json={"messages": MESSAGES, "max_tokens": 3, "mock": {"output": "a"}},
        ).json()
        assert resp["usage"]["prompt_tokens"] == chat["count"]

        bad = http.post("/detokenize", json={"tokens": [10**9]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
        bad = http.post("/tokenize", json={})
        assert bad.status_code == 400


# -- the mock extension ----------------------------------------------------------------------


def test_malformed_mock_unknown_key_is_400_naming_it(server: Server) -> None:
    resp = httpx.post(
        server.v1 + "/chat/completions",
        json={"messages": MESSAGES, "max_tokens": 5, "mock": {"output": "a", "speed": 3}},
        timeout=10,
    )
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert "speed" in error["message"]
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("stream", [False, True])
def test_malformed_mock_list_length_is_400_naming_it(server: Server, stream: bool) -> None:
    resp = httpx.post(
        server.v1 + "/chat/completions",
        json={
            "messages": MESSAGES,
            "max_tokens": 5,
            "n": 3,
            "stream": stream,
            "mock": {"output": ["a", "b"]},
        },
        timeout=10,
    )
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert "mock" in error["message"] and "n=3" in error["message"]
    assert error["param"] == "mock"


def test_mock_on_the_echo_engine_is_400() -> None:
    with rotor_server() as echo:
        client = echo.openai()
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="echo", messages=MESSAGES, **mock("x"))
        assert "mock" in info.value.message
        assert info.value.body["param"] == "mock"
        # Without it the echo engine answers.
        resp = client.chat.completions.create(model="echo", messages=MESSAGES)
        assert resp.choices[0].message.content == "hi"


# -- missing max_tokens ---------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_missing_max_tokens_is_context_minus_prompt(
    server: Server, client: openai.OpenAI, model: str, endpoint: str, stream: bool
) -> None:
    long_script = "The quick brown fox jumps over the lazy dog. " * 60
    assert len(server.tokenize(long_script)) > CONTEXT
    opts: dict[str, Any] = {"stream": stream, **mock(long_script)}
    if stream:
        opts["stream_options"] = {"include_usage": True}
    if endpoint == "chat":
        resp = client.chat.completions.create(model=model, messages=MESSAGES, **opts)
    else:
        resp = client.completions.create(model=model, prompt="hi there", **opts)
    finish = None
    if stream:
        for chunk in resp:
            for c in chunk.choices:
                finish = c.finish_reason or finish
            usage = chunk.usage
    else:
        finish, usage = resp.choices[0].finish_reason, resp.usage
    assert finish == "length"
    assert usage.completion_tokens == CONTEXT - usage.prompt_tokens


# -- preemption under a tiny KV cache ---------------------------------------------------------------


BLOCK, BLOCKS = 4, 16


@pytest.fixture(scope="module")
def tiny() -> Iterator[Server]:
    """64 tokens of KV cache in all, real time (ratio 1) so requests overlap."""
    with rotor_server(
        "out=mocker",
        "--num-kv-blocks",
        str(BLOCKS),
        "--block-size",
        str(BLOCK),
        "--speedup-ratio",
        "1",
    ) as srv:
        yield srv


def test_preemption_under_a_tiny_kv_cache_completes_every_request(tiny: Server) -> None:
    tail = "the quick brown fox jumps over the lazy dog, again and again."
    outputs = [f"request {i}: {tail} {tail}" for i in range(3)]
    sizes = [len(tiny.tokenize("hi")) + len(tiny.tokenize(o)) + 1 for o in outputs]
    assert all(s <= BLOCK * BLOCKS for s in sizes), "each request fits alone"
    assert sizes[0] + sizes[1] > BLOCK * BLOCKS, "two together do not"

    async def one(http: httpx.AsyncClient, text: str) -> dict[str, Any]:
        body = {"prompt": "hi", "max_tokens": 60, "mock": {"output": text}}
        resp = await http.post("/v1/completions", json=body)
        assert resp.status_code == 200, resp.text
        return resp.json()

    async def all_at_once() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=tiny.url, timeout=60) as http:
            return await asyncio.gather(*(one(http, o) for o in outputs))

    def engine() -> dict[str, Any]:
        (state,) = httpx.get(tiny.url + "/health", timeout=10).json()["engines"].values()
        return state

    preempted = engine()["preemptions"]  # the module's other test shares the server
    results = asyncio.run(all_at_once())
    for text, size, result in zip(outputs, sizes, results, strict=True):
        (choice,) = result["choices"]
        assert choice["text"] == text
        assert choice["finish_reason"] == "stop"
        assert result["usage"]["completion_tokens"] == size - len(tiny.tokenize("hi"))
    state = engine()
    assert state["preemptions"] > preempted  # these requests were preempted
    assert state["kv_blocks_total"] == BLOCKS
    assert state["running"] == state["waiting"] == 0


# -- --speedup-ratio -----------------------------------------------------------------------------
# What the ratio does to the step loop's waits is tested with an injected sleep
# (tests/engines/test_mocker_scheduling.py); here: the flag reaches the engine,
# and a real server never streams faster than its simulated time allows.


def test_the_speedup_ratio_flag_reaches_the_engine() -> None:
    from rotor.cli import build_parser, parse_io, run_config
    from rotor.serve.build import build_system

    args = build_parser().parse_args(["run", "out=mocker", "--speedup-ratio", "10"])
    system = build_system(run_config(args, *parse_io(args.io)))
    (engine,) = system.engines
    assert engine.config.speedup_ratio == 10  # type: ignore[attr-defined]


def test_a_streamed_answer_takes_at_least_its_simulated_time(tiny: Server) -> None:
    script = "The quick brown fox jumps over the lazy dog. " * 3
    tokens = len(tiny.tokenize(script))
    body = {
        "messages": MESSAGES,
        "max_tokens": tokens + 5,
        "stream": True,
        "mock": {"output": script},
    }
    before = tiny.metric("rotor_engine_simulated_seconds_total")
    start = time.perf_counter()
    with httpx.stream("POST", tiny.v1 + "/chat/completions", json=body, timeout=30) as resp:
        for _ in resp.iter_lines():
            pass
    elapsed = time.perf_counter() - start
    simulated_s = tiny.metric("rotor_engine_simulated_seconds_total") - before
    assert simulated_s >= tokens * 0.010  # at least a 10 ms decode step per token
    assert elapsed >= simulated_s  # ratio 1: sleeping is never shorter than asked
