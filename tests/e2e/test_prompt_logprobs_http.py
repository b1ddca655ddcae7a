"""The prompt's logprobs over HTTP with the mocker, in each place an engine
can be: `rotor run` (in the server's process), `rotor run --http-workers 2`
(the engine in a process of its own, over a unix socket) and a `rotor
worker` behind a `rotor frontend` on a real nats-server. The official
openai SDK and raw SSE: echo with logprobs (the prompt's, then the
answer's, in OpenAI's legacy shape), `max_tokens: 0` (the prompt alone),
`prompt_logprobs` on completions choices and at the chat root (vLLM's
shape). The mocker's prompt logprobs are a function of each token's prefix
(engines/mocker/sampler.py), so every value is checked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import openai
import pytest

from rotor.engines.mocker.sampler import prompt_logprobs, readable_vocab
from rotor.model.builtin import builtin_test_model
from rotor.protocol.engine import PromptLogprob

from support.cluster import nats_server, start_frontend, start_worker
from support.server import Server, rotor_server
from support.sse import data_events

MODEL = "mock-model"
_, TOK = builtin_test_model()
VOCAB = readable_vocab(TOK)
PROMPT = "Score this prompt, please."
ASK = [{"role": "user", "content": "Weigh my words."}]
SCRIPT = {"output": "Done.", "end": "eos"}


@pytest.fixture(scope="module", params=["run", "engine_process", "nats"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    with ExitStack() as stack:
        if request.param == "run":
            yield stack.enter_context(rotor_server("out=mocker", "--speedup-ratio", "0"))
        elif request.param == "engine_process":
            yield stack.enter_context(
                rotor_server("out=mocker", "--speedup-ratio", "0", "--http-workers", "2")
            )
        else:
            nats = stack.enter_context(nats_server())
            worker = start_worker(nats, "out=mocker", "--speedup-ratio", "0")
            stack.callback(worker.proc.stop)
            frontend = start_frontend(nats)
            stack.callback(frontend.proc.stop)
            frontend.wait_workers(MODEL, {worker.id})
            yield frontend


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


def expected(ids: list[int], top: int) -> list[PromptLogprob]:
    """What the mocker scores a prompt with (any engine, any request)."""
    return prompt_logprobs(VOCAB, ids, top)


def text_of(token_id: int) -> str:
    return TOK.decode([token_id], skip_special_tokens=False)


def post(server: Server, route: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{server.v1}/{route}", json={"model": MODEL, **body}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def check_echoed(logprobs: dict[str, Any], ids: list[int], top: int) -> None:
    """The legacy logprobs of an echoed prompt: its tokens first, the first's null."""
    n = len(ids)
    assert logprobs["tokens"][:n] == [text_of(t) for t in ids]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    scored = expected(ids, top)
    assert logprobs["token_logprobs"][1:n] == [e.logprob for e in scored]
    for entry, tops in zip(scored, logprobs["top_logprobs"][1:n], strict=True):
        want = {text_of(entry.token_id): entry.logprob}
        for tid, value in entry.top:
            want.setdefault(text_of(tid), value)
        assert tops == want
    offsets = logprobs["text_offset"]
    assert offsets[0] == 0
    assert [b - a for a, b in zip(offsets, offsets[1:], strict=False)] == [
        len(t) for t in logprobs["tokens"][:-1]
    ]


def test_echo_with_logprobs_scores_the_prompt_then_the_answer(
    server: Server, client: openai.OpenAI
) -> None:
    ids = server.tokenize(PROMPT)
    resp = client.completions.create(
        model=MODEL, prompt=PROMPT, echo=True, logprobs=2, max_tokens=4, seed=3
    )
    (choice,) = resp.choices
    assert choice.text.startswith(PROMPT)
    assert choice.logprobs is not None
    lps = choice.logprobs.model_dump()
    check_echoed(lps, ids, 2)
    assert resp.usage is not None and resp.usage.completion_tokens == 4
    assert len(lps["tokens"]) == len(ids) + 4  # then the answer's own
    assert all(v is not None for v in lps["token_logprobs"][len(ids) :])
    # token-id prompts, as lm-eval sends them, score the same
    by_ids = client.completions.create(
        model=MODEL, prompt=ids, echo=True, logprobs=2, max_tokens=4, seed=3
    )
    assert by_ids.choices[0].logprobs is not None
    assert by_ids.choices[0].logprobs.model_dump() == lps


def test_max_tokens_zero_returns_the_prompt_alone(server: Server, client: openai.OpenAI) -> None:
    ids = server.tokenize(PROMPT)
    resp = client.completions.create(
        model=MODEL, prompt=[PROMPT, "Another one."], echo=True, logprobs=0, max_tokens=0, n=2
    )
    assert [c.text for c in resp.choices] == [PROMPT, PROMPT, "Another one.", "Another one."]
    assert all(c.finish_reason == "length" for c in resp.choices)
    assert resp.usage is not None and resp.usage.completion_tokens == 0
    for c in resp.choices[:2]:
        assert c.logprobs is not None
        lps = c.logprobs.model_dump()
        assert len(lps["tokens"]) == len(ids)
        check_echoed(lps, ids, 0)
    other = resp.choices[2].logprobs
    assert other is not None
    check_echoed(other.model_dump(), server.tokenize("Another one."), 0)
    # without logprobs: the prompt's text alone
    plain = client.completions.create(model=MODEL, prompt=PROMPT, echo=True, max_tokens=0)
    assert plain.choices[0].text == PROMPT and plain.choices[0].logprobs is None


def test_a_stream_sends_the_prompt_s_logprobs_in_each_choice_s_first_chunk(
    server: Server,
) -> None:
    ids = server.tokenize(PROMPT)
    body = {
        "model": MODEL,
        "prompt": PROMPT,
        "echo": True,
        "logprobs": 1,
        "n": 2,
        "seed": 1,  # (the answer's logprobs are seeded)
        "mock": {**SCRIPT, "tokens_per_step": 1},
    }
    whole = post(server, "completions", body)
    with httpx.stream(
        "POST", f"{server.v1}/completions", json={**body, "stream": True}, timeout=30
    ) as r:
        assert r.status_code == 200, r.read()
        chunks = data_events(r)
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        first = mine[0]
        assert first["text"].startswith(PROMPT)
        assert first["logprobs"]["tokens"][: len(ids)] == [text_of(t) for t in ids]
        assert first["logprobs"]["token_logprobs"][0] is None
        joined: dict[str, list[Any]] = {k: [] for k in first["logprobs"]}
        for c in mine:
            for k, v in c["logprobs"].items():
                joined[k] += v
        assert joined == whole["choices"][index]["logprobs"]
        assert "".join(c["text"] for c in mine) == whole["choices"][index]["text"]
        check_echoed(joined, ids, 1)


def test_prompt_logprobs_on_each_completions_choice(server: Server) -> None:
    ids = server.tokenize(PROMPT)
    body = {"prompt": PROMPT, "prompt_logprobs": 3, "n": 2, "mock": SCRIPT}
    resp = post(server, "completions", body)
    for c in resp["choices"]:
        assert c["logprobs"] is None  # `logprobs` not asked
        listed = c["prompt_logprobs"]
        assert len(listed) == len(ids) and listed[0] is None
        for entry, position in zip(expected(ids, 3), listed[1:], strict=True):
            own = position[str(entry.token_id)]
            assert own == {
                "logprob": entry.logprob,
                "rank": entry.rank,
                "decoded_token": text_of(entry.token_id),
            }
            ranks = {int(k): v["rank"] for k, v in position.items() if int(k) != entry.token_id}
            assert sorted(ranks.values()) == [r for r in (1, 2, 3) if r != entry.rank]
    # not asked: no such field
    assert "prompt_logprobs" not in post(server, "completions", {"prompt": PROMPT})["choices"][0]


def test_prompt_logprobs_at_the_chat_root(server: Server, client: openai.OpenAI) -> None:
    ids = server.tokenize(messages=ASK)
    resp = client.chat.completions.create(
        model=MODEL,
        messages=ASK,  # type: ignore[arg-type]
        extra_body={"prompt_logprobs": 0, "mock": SCRIPT},
    )
    listed = resp.model_dump()["prompt_logprobs"]
    assert listed[0] is None and len(listed) == len(ids)
    assert listed[1:] == [
        {
            str(e.token_id): {
                "logprob": e.logprob,
                "rank": e.rank,
                "decoded_token": text_of(e.token_id),
            }
        }
        for e in expected(ids, 0)
    ]
    assert resp.choices[0].message.content == "Done."
    assert resp.choices[0].logprobs is None


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        ("completions", {"prompt": PROMPT, "max_tokens": 0}, "max_tokens"),
        ("completions", {"prompt": PROMPT, "prompt_logprobs": 21}, "prompt_logprobs"),
        ("completions", {"prompt": PROMPT, "prompt_logprobs": -1}, "prompt_logprobs"),
        (
            "completions",
            {"prompt": PROMPT, "prompt_logprobs": 1, "stream": True},
            "prompt_logprobs",
        ),
        (
            "chat/completions",
            {"messages": ASK, "prompt_logprobs": 1, "stream": True},
            "prompt_logprobs",
        ),
    ],
)
def test_what_cannot_be_is_a_400_naming_the_field(
    server: Server, route: str, body: dict[str, Any], param: str
) -> None:
    r = httpx.post(f"{server.v1}/{route}", json={"model": MODEL, **body}, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and param in error["message"]


def test_the_echo_engine_cannot_and_says_which_field() -> None:
    with rotor_server() as server:  # the echo engine: no tokenizer, text out
        for body, param in (
            ({"prompt_logprobs": 1}, "prompt_logprobs"),
            ({"echo": True, "logprobs": 1}, "logprobs"),
        ):
            r = httpx.post(
                f"{server.v1}/completions", json={"model": "echo", "prompt": "x", **body}
            )
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == param
        # echo with max_tokens 0 still works: the prompt alone
        r = httpx.post(
            f"{server.v1}/completions",
            json={"model": "echo", "prompt": "say it", "echo": True, "max_tokens": 0},
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == "say it"
