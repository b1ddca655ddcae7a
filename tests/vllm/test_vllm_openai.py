"""`rotor run out=vllm` with the official openai SDK: one real vLLM engine
for the whole module, serving a tiny random Llama written by the test.

A random model's output is noise, so each test asserts what rotor and vLLM
must make true regardless: determinism, exact lengths, stops that truncate,
constraints a random model can only satisfy when vLLM enforces them."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from rotor.bench import profiling
from rotor.planner.profile import Profile

from support.llama import add_llama_weights
from support.models import chatml_model
from support.server import Server
from support.vllm_setup import vllm_server
from support.wait import wait_for

CONTEXT = 2048
MSGS = [{"role": "user", "content": "Tell me about Paris and the weather."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model = add_llama_weights(chatml_model(tmp_path_factory.mktemp("vllm"), "tiny"), CONTEXT)
    # priority scheduling changes nothing for the default priority 0 the other tests send
    with vllm_server(model, "--scheduling-policy", "priority") as s:
        yield s


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


def _greedy(client: openai.OpenAI, **kw) -> openai.types.chat.ChatCompletion:
    return client.chat.completions.create(
        model="tiny", messages=MSGS, temperature=0, max_tokens=kw.pop("max_tokens", 24), **kw
    )


def test_greedy_stream_equals_non_stream_and_repeats(client: openai.OpenAI) -> None:
    a = _greedy(client)
    b = _greedy(client)
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model="tiny", messages=MSGS, temperature=0, max_tokens=24, stream=True
        )
        if c.choices
    )
    assert a.choices[0].message.content
    assert a.choices[0].message.content == b.choices[0].message.content == text


def test_seeded_sampling_repeats(client: openai.OpenAI) -> None:
    def sample(seed: int) -> str | None:
        r = client.chat.completions.create(
            model="tiny", messages=MSGS, temperature=1.0, seed=seed, max_tokens=24
        )
        return r.choices[0].message.content

    assert sample(7) == sample(7)
    assert sample(7) != sample(8) or sample(7) != sample(9)


def test_max_tokens_gives_exactly_that_many(client: openai.OpenAI) -> None:
    for n in (1, 5, 17):
        r = _greedy(client, max_tokens=n)
        assert r.usage is not None and r.usage.completion_tokens == n
        assert r.choices[0].finish_reason == "length"


def test_stop_string_from_greedy_output_truncates(client: openai.OpenAI) -> None:
    full = _greedy(client, max_tokens=32).choices[0].message.content or ""
    assert len(full) >= 8
    stop = full[4:7]
    cut = full[: full.index(stop)]
    r = _greedy(client, max_tokens=32, stop=[stop])
    assert r.choices[0].message.content == cut
    assert r.choices[0].finish_reason == "stop"
    chunks = list(
        client.chat.completions.create(
            model="tiny", messages=MSGS, temperature=0, max_tokens=32, stop=[stop], stream=True
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == cut
    assert stop not in streamed


def test_stop_token_ids_end_at_that_token(server: Server, client: openai.OpenAI) -> None:
    prompt = server.tokenize(text="Hello there")
    r = client.completions.create(
        model="tiny", prompt=prompt, temperature=0, max_tokens=12, logprobs=0
    )
    tokens = r.choices[0].logprobs.tokens
    # a generated token whose text is one whole token names its id
    ids = [server.tokenize(text=t) for t in tokens]
    position = next(i for i in range(2, len(tokens)) if len(ids[i]) == 1 and ids[i] not in ids[:i])
    target = ids[position][0]
    s = client.completions.create(
        model="tiny",
        prompt=prompt,
        temperature=0,
        max_tokens=12,
        extra_body={"stop_token_ids": [target]},
    )
    assert s.choices[0].finish_reason == "stop"
    # the text before the stop token (a character it splits is held back)
    assert r.choices[0].text.startswith(s.choices[0].text)
    assert len(s.choices[0].text) < len(r.choices[0].text)
    assert (s.choices[0].model_extra or {}).get("stop_reason") == target
    assert s.usage is not None and s.usage.completion_tokens == position + 1


def test_completions_with_token_id_prompts(server: Server, client: openai.OpenAI) -> None:
    prompt = server.tokenize(text="The quick brown fox")
    by_ids = client.completions.create(model="tiny", prompt=prompt, temperature=0, max_tokens=10)
    by_text = client.completions.create(
        model="tiny", prompt="The quick brown fox", temperature=0, max_tokens=10
    )
    assert by_ids.usage is not None and by_ids.usage.prompt_tokens == len(prompt)
    assert by_ids.choices[0].text == by_text.choices[0].text
    two = client.completions.create(
        model="tiny", prompt=[prompt, prompt[:2]], temperature=0, max_tokens=4
    )
    assert sorted(c.index for c in two.choices) == [0, 1]


def test_logprobs_are_the_tokens_and_ranked(client: openai.OpenAI) -> None:
    r = _greedy(client, max_tokens=6, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 6
    for tok in content:
        assert tok.logprob <= 0
        assert len(tok.top_logprobs) == 3
        values = [t.logprob for t in tok.top_logprobs]
        assert values == sorted(values, reverse=True)
        # greedy: the chosen token is the most likely one
        assert tok.top_logprobs[0].token == tok.token
        assert abs(tok.top_logprobs[0].logprob - tok.logprob) < 1e-4


def test_n_2_gives_two_choices(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="tiny", messages=MSGS, n=2, temperature=1.0, seed=3, max_tokens=8
    )
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert all(c.finish_reason == "length" for c in r.choices)
    assert r.usage is not None and r.usage.completion_tokens == 16


def test_return_token_ids_are_vllm_s_own(server: Server, client: openai.OpenAI) -> None:
    """`return_token_ids` with vLLM: greedy, so streamed and not agree; the
    ids are as many as usage counts (a random model's bytes need not decode
    to whole characters, so the text is not compared)."""
    ids = {"return_token_ids": True}
    r = _greedy(client, max_tokens=12, n=2, extra_body=ids).to_dict()
    assert r["prompt_token_ids"] == server.tokenize(messages=MSGS)
    token_ids = [c["token_ids"] for c in r["choices"]]
    assert all(len(t) == 12 for t in token_ids) and token_ids[0] == token_ids[1]
    assert r["usage"]["completion_tokens"] == 24
    streamed: list[int] = []
    for chunk in client.chat.completions.create(
        model="tiny", messages=MSGS, temperature=0, max_tokens=12, stream=True, extra_body=ids
    ):
        if chunk.choices:
            streamed += (chunk.choices[0].model_extra or {}).get("token_ids") or []
    assert streamed == token_ids[0]


def test_priority_reaches_a_priority_scheduling_vllm(client: openai.OpenAI) -> None:
    """Started with `--scheduling-policy priority`, vLLM takes a request's
    `priority` (an fcfs engine would make it a 400 naming the flag, as
    tests/e2e/test_priority.py checks with the mocker); greedy, the answer
    does not depend on it."""
    answers = {
        p: _greedy(client, max_tokens=8, extra_body={"priority": p}).choices[0].message.content
        for p in (-3, 0, 7)
    }
    assert answers[0] and answers[-3] == answers[0] == answers[7]


SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}


def _validate(value: object) -> None:
    assert isinstance(value, dict) and set(value) == {"city", "days"}
    assert isinstance(value["city"], str) and len(value["city"]) <= 12
    assert isinstance(value["days"], int) and 1 <= value["days"] <= 9


def test_json_schema_is_enforced(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="tiny",
        messages=MSGS,
        temperature=0.7,
        seed=1,
        max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}},
    )
    assert r.choices[0].finish_reason == "stop"
    _validate(json.loads(r.choices[0].message.content or ""))
    g = client.chat.completions.create(
        model="tiny",
        messages=MSGS,
        max_tokens=200,
        temperature=0,
        extra_body={"guided_json": SCHEMA},
    )
    _validate(json.loads(g.choices[0].message.content or ""))


def test_guided_choice_and_regex_are_enforced(client: openai.OpenAI) -> None:
    options = ["sunny", "rainy", "foggy"]
    for seed in (1, 2):
        c = client.chat.completions.create(
            model="tiny",
            messages=MSGS,
            temperature=1.0,
            seed=seed,
            max_tokens=20,
            extra_body={"guided_choice": options},
        )
        assert c.choices[0].message.content in options
    pattern = r"[A-Z][a-z]{2,5}-[0-9]{3}"
    r = client.chat.completions.create(
        model="tiny",
        messages=MSGS,
        temperature=1.0,
        seed=5,
        max_tokens=30,
        extra_body={"guided_regex": pattern},
    )
    assert re.fullmatch(pattern, r.choices[0].message.content or "")


def test_structured_outputs_are_enforced(client: openai.OpenAI) -> None:
    """vLLM >= 0.12 clients' spelling: each kind reaches vLLM and binds a random model."""

    def ask(so: dict, seed: int = 3, max_tokens: int = 30) -> str:
        r = client.chat.completions.create(
            model="tiny",
            messages=MSGS,
            temperature=1.0,
            seed=seed,
            max_tokens=max_tokens,
            extra_body={"structured_outputs": so},
        )
        return r.choices[0].message.content or ""

    pattern = r"[A-Z][a-z]{2,5}-[0-9]{3}"
    assert re.fullmatch(pattern, ask({"regex": pattern}))
    options = ["sunny", "rainy", "foggy"]
    assert all(ask({"choice": options}, seed) in options for seed in (1, 2))
    # (xgrammar lets a raw control character into a string: JSON's strict mode refuses it)
    _validate(json.loads(ask({"json": SCHEMA}, max_tokens=200), strict=False))
    assert ask({"grammar": 'root ::= "cat" | "dog"'}) in ("cat", "dog")


def test_repeated_long_prompt_reports_cached_tokens(client: openai.OpenAI) -> None:
    long = [{"role": "user", "content": "Numbers and symbols: " + " ".join(map(str, range(150)))}]
    first = client.chat.completions.create(model="tiny", messages=long, max_tokens=2)
    second = client.chat.completions.create(model="tiny", messages=long, max_tokens=2)
    assert first.usage is not None and second.usage is not None
    details = second.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens is not None
    # vLLM caches whole blocks of 32 tokens and recomputes at least the last token
    assert details.cached_tokens >= (second.usage.prompt_tokens - 1) // 32 * 32 - 32
    assert details.cached_tokens > 0
    assert details.cached_tokens > (first.usage.prompt_tokens_details.cached_tokens or 0)


def test_disconnect_mid_stream_frees_vllm(server: Server) -> None:
    body = {
        "model": "tiny",
        "messages": MSGS,
        "max_tokens": 1500,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", server.v1 + "/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for n, _ in enumerate(r.iter_lines()):
            if n >= 6:
                break
    # One more request: vLLM's scheduler reports its stats with every step, and
    # the last step of this one shows who is still running.
    client = server.openai()

    def nobody_runs_after_one_more() -> bool:  # the abort reaches vLLM's core asynchronously
        _greedy(client, max_tokens=2)
        return server.metric("rotor_engine_running") == 0

    wait_for("vLLM to let go of the left request", nobody_runs_after_one_more, 60)
    assert server.metric("rotor_engine_active_requests") == 0


def test_prompt_over_context_is_400_naming_both_numbers(client: openai.OpenAI) -> None:
    words = " ".join(["Paris"] * 3000)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": words}], max_tokens=10
        )
    message = str(err.value)
    assert str(CONTEXT) in message
    prompt_tokens = re.search(r"(\d+) prompt tokens", message)
    assert prompt_tokens is not None and int(prompt_tokens.group(1)) > CONTEXT


def test_health_and_engine_metrics(server: Server, client: openai.OpenAI) -> None:
    assert httpx.get(server.url + "/health", timeout=5).status_code == 200
    assert server.metric("rotor_engine_kv_blocks_capacity") > 0
    # its own request, not what the module's other tests made
    before = server.metric("rotor_engine_generated_tokens_total")
    reply = _greedy(client, max_tokens=5, extra_body={"ignore_eos": True})
    assert reply.usage is not None and reply.usage.completion_tokens == 5
    assert server.metric("rotor_engine_generated_tokens_total") == before + 5


def test_planner_profile_measures_a_vllm_worker(server: Server, tmp_path: Path) -> None:
    """`rotor planner profile` on a tiny grid: every point measured, answers of
    exactly --osl tokens (vLLM takes ignore_eos), prompts near their length."""
    out = tmp_path / "profile.json"
    parser = argparse.ArgumentParser()
    profiling.add_arguments(parser)
    argv = ["--url", server.v1, "--out", str(out), "--isl", "32,128", "--concurrency", "1,2"]
    args = parser.parse_args([*argv, "--osl", "4", "--requests", "2", "--quiet"])
    assert profiling.main(args) == 0
    profile = Profile.load(str(out))
    assert profile.model == "tiny" and [p.isl for p in profile.prefill] == [32, 128]
    assert sorted((d.context, d.concurrency) for d in profile.decode) == [
        (34, 1),
        (34, 2),
        (130, 1),
        (130, 2),
    ]
    assert profile.meta["ignore_eos"] is True and profile.meta["max_model_len"] == CONTEXT
    for p in profile.meta["points"]:
        if p["kind"] == "decode":
            assert p["output_tokens"] == p["requests"] * 4, p
        else:
            assert abs(p["prompt_tokens"] - p["isl"]) <= 0.25 * p["isl"] + 8, p
            assert p["cached_tokens"] == 0, p


def test_model_dir_file_names() -> None:
    """The helper writes what vLLM loads (guards the test model itself)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        d = add_llama_weights(chatml_model(tmp, "m"), 256)
        assert {p.name for p in Path(d).iterdir()} >= {
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
        }


def test_engine_death_is_503_not_a_hang(server: Server, client: openai.OpenAI) -> None:
    """Runs last in this module: it kills vLLM's engine core process."""
    import os
    import signal
    import subprocess

    children = subprocess.run(
        ["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True
    ).stdout.split()
    cores = [
        pid
        for pid in children
        if "EngineCor" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        or "EngineCor" in Path(f"/proc/{pid}/comm").read_text()
    ]
    assert cores, children
    for pid in cores:
        os.kill(int(pid), signal.SIGKILL)
    statuses: list[int] = []

    def refused() -> bool:
        try:
            _greedy(client.with_options(timeout=30), max_tokens=4)
        except openai.APIStatusError as e:
            statuses.append(e.status_code)
            return True
        return False

    wait_for("a request refused once the engine died", refused, 60)
    assert statuses == [503]
