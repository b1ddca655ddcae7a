"""Prompt logprobs through `rotor run out=vllm` against vLLM's own OpenAI
server on the same tiny random Llama (each started once for the module, one
after the other): lm-evaluation-harness (`--model local-completions`, the
real client that scores prompts) gets the same per-choice loglikelihoods
(within 1e-3) and the same accuracy on a local multiple-choice task through
both; and the raw answers agree field by field — echo with logprobs (whole,
`max_tokens: 0`, and a stream's first chunk), `prompt_logprobs` on a
completions choice and at the chat root."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.llama import add_llama_weights
from support.lm_eval_task import Scored, run_lm_eval, write_task
from support.models import chatml_model
from support.sse import data_events
from support.vllm_setup import vllm_openai_server, vllm_server

CONTEXT = 2048
NAME = "tiny"
TOLERANCE = 1e-3
PROMPT = "Paris is the capital of France, and Rome is the capital of"
ASK = [{"role": "user", "content": "Which city is the capital of France?"}]


@dataclass
class Seen:
    """What one server answered: lm-eval's scores, and the probes' bodies."""

    scored: Scored
    probes: dict[str, Any]


def probe(url: str) -> dict[str, Any]:
    """The same prompt-scoring requests, whichever server is at `url`."""
    ids = httpx.post(url + "/tokenize", json={"model": NAME, "prompt": PROMPT}, timeout=30).json()[
        "tokens"
    ]

    def post(route: str, body: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(f"{url}/v1/{route}", json={"model": NAME, **body}, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()

    echo = {"prompt": ids, "echo": True, "logprobs": 2, "temperature": 0}
    with httpx.stream(
        "POST",
        f"{url}/v1/completions",
        json={"model": NAME, **echo, "max_tokens": 3, "stream": True},
        timeout=120,
    ) as r:
        assert r.status_code == 200, r.read()
        chunks = data_events(r)
    return {
        "ids": ids,
        "echo": post("completions", {**echo, "max_tokens": 3}),
        "prompt_alone": post("completions", {**echo, "max_tokens": 0}),
        "stream_first": next(c for c in chunks if c.get("choices")),
        "listed": post("completions", {"prompt": ids, "prompt_logprobs": 3, "max_tokens": 1}),
        "chat": post("chat/completions", {"messages": ASK, "prompt_logprobs": 1, "max_tokens": 1}),
    }


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return add_llama_weights(chatml_model(tmp_path_factory.mktemp("plp"), NAME), CONTEXT)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_task(tmp_path_factory.mktemp("task"))


@pytest.fixture(scope="module")
def rotor(model: Path, task: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seen]:
    with vllm_server(model) as server:
        out = tmp_path_factory.mktemp("rotor-lm-eval")
        yield Seen(run_lm_eval(server.url, NAME, model, task, out, batch_size=4), probe(server.url))


@pytest.fixture(scope="module")
def vllm(
    rotor: Seen, model: Path, task: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Seen]:
    """(After rotor's: never two engines starting at once on two cores.)"""
    with vllm_openai_server(model, NAME, "--max-model-len", str(CONTEXT)) as url:
        out = tmp_path_factory.mktemp("vllm-lm-eval")
        yield Seen(run_lm_eval(url, NAME, model, task, out, batch_size=4), probe(url))


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= TOLERANCE


def test_lm_eval_scores_every_choice_the_same(rotor: Seen, vllm: Seen) -> None:
    ours, theirs = rotor.scored.loglikelihoods, vllm.scored.loglikelihoods
    assert sorted(ours) == sorted(theirs) and len(ours) == 8
    diffs = [
        abs(a - b)
        for doc in ours
        for a, b in zip(ours[doc], theirs[doc], strict=True)
        if len(ours[doc]) == len(theirs[doc]) == 4
    ]
    assert len(diffs) == 32
    print(f"per-choice loglikelihood: max |rotor - vLLM| = {max(diffs):.2e} over 32 choices")
    assert max(diffs) <= TOLERANCE, (ours, theirs)


def test_lm_eval_finds_the_same_accuracy(rotor: Seen, vllm: Seen) -> None:
    print(f"accuracy: rotor {rotor.scored.accuracy}, vLLM {vllm.scored.accuracy}")
    assert rotor.scored.accuracy == vllm.scored.accuracy


PART = "\ufffd"  # how rotor names a token that is part of a character (see same_text)


def same_text(ours: str, theirs: str) -> bool:
    """A token's text as both name it. One that holds part of a multi-byte
    character is U+FFFD to rotor (its decoding of the token alone, in every
    logprobs rotor gives) while vLLM 0.32 mends it from the tokens before it
    or sends "": those are not compared."""
    return PART in ours or ours == theirs


def same_legacy(ours: dict[str, Any], theirs: dict[str, Any], exact: int) -> None:
    """Two legacy `logprobs` objects: the values within TOLERANCE; the texts
    (and offsets, for the first `exact` tokens, the ASCII prompt's) as equal as
    `same_text` says; an alternative rotor names by text is vLLM's too."""
    assert len(ours["tokens"]) == len(theirs["tokens"])
    assert ours["tokens"][:exact] == theirs["tokens"][:exact]
    assert ours["text_offset"][:exact] == theirs["text_offset"][:exact]
    assert all(same_text(a, b) for a, b in zip(ours["tokens"], theirs["tokens"], strict=True))
    assert all(
        close(a, b) for a, b in zip(ours["token_logprobs"], theirs["token_logprobs"], strict=True)
    )
    for a, b in zip(ours["top_logprobs"], theirs["top_logprobs"], strict=True):
        if a is None or b is None:
            assert a is b
            continue
        assert all(close(v, b[k]) for k, v in a.items() if PART not in k)


def test_echo_with_logprobs_is_vllm_s(rotor: Seen, vllm: Seen) -> None:
    ours, theirs = rotor.probes, vllm.probes
    assert ours["ids"] == theirs["ids"]
    n = len(ours["ids"])
    for key in ("echo", "prompt_alone"):
        a, b = ours[key]["choices"][0], theirs[key]["choices"][0]
        assert a["text"].startswith(PROMPT) and b["text"].startswith(PROMPT)
        same_legacy(a["logprobs"], b["logprobs"], n)
        assert a["logprobs"]["token_logprobs"][0] is None
    assert ours["prompt_alone"]["choices"][0]["text"] == PROMPT
    assert theirs["prompt_alone"]["choices"][0]["text"] == PROMPT
    assert len(ours["prompt_alone"]["choices"][0]["logprobs"]["tokens"]) == n
    assert len(ours["echo"]["choices"][0]["logprobs"]["tokens"]) == n + 3
    # streamed: the first chunk has the prompt's text and logprobs (then the first
    # token's, in both when its text is whole; rotor holds a token that is part of a
    # character, and its logprob, for the next chunk, as it does any held text)
    a, b = ours["stream_first"]["choices"][0], theirs["stream_first"]["choices"][0]
    assert a["text"].startswith(PROMPT) and b["text"].startswith(PROMPT)
    assert len(a["logprobs"]["tokens"]) in (n, n + 1) and len(b["logprobs"]["tokens"]) == n + 1
    prompt_part = {k: v[:n] for k, v in a["logprobs"].items()}
    same_legacy(prompt_part, {k: v[:n] for k, v in b["logprobs"].items()}, n)


def same_listed(ours: list[Any], theirs: list[Any]) -> None:
    """Two `prompt_logprobs` lists: the same ids, ranks and texts; values within TOLERANCE."""
    assert len(ours) == len(theirs) and ours[0] is None and theirs[0] is None
    for a, b in zip(ours[1:], theirs[1:], strict=True):
        assert list(a) == list(b)  # the same ids, in the same order (the token's own first)
        for key in a:
            assert a[key]["rank"] == b[key]["rank"]
            assert same_text(a[key]["decoded_token"], b[key]["decoded_token"])
            assert close(a[key]["logprob"], b[key]["logprob"])


def test_prompt_logprobs_are_vllm_s(rotor: Seen, vllm: Seen) -> None:
    ours, theirs = rotor.probes, vllm.probes
    same_listed(
        ours["listed"]["choices"][0]["prompt_logprobs"],
        theirs["listed"]["choices"][0]["prompt_logprobs"],
    )
    assert len(ours["listed"]["choices"][0]["prompt_logprobs"]) == len(ours["ids"])
    same_listed(ours["chat"]["prompt_logprobs"], theirs["chat"]["prompt_logprobs"])
