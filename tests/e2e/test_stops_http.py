"""Every row of docs/stops-and-eos.md through the HTTP API, on scripted mocker output.

Each row runs streaming and non-streaming against one real `rotor run
out=mocker --model-path DIR` (a ChatML model dir with EOS ids `<|im_end|>` and
`<|endoftext|>`), and both must give exactly the same text, finish_reason,
stop_reason and usage. Raw HTTP is used so `stop_reason` is read from the JSON
as sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.models import beam_model, chatml_model
from support.server import Server, rotor_server
from support.sse import data_events

MESSAGES = [{"role": "user", "content": "hi"}]
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model = chatml_model(tmp_path_factory.mktemp("stops"))
    with rotor_server("out=mocker", "--model-path", str(model), "--speedup-ratio", "0") as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def prompt_tokens(server: Server) -> int:
    """What the chat prompt costs, by the server's own template and tokenizer."""
    return len(server.tokenize(messages=MESSAGES))


# -- one request, streamed or not, normalised ------------------------------------------


@dataclass
class Outcome:
    """What a client can observe of a finished response, per choice."""

    texts: list[str]
    finish: list[str | None]
    stop_reason: list[Any]
    usage: dict[str, Any] | None = field(default=None, compare=False)
    calls: list[int] = field(default_factory=list, compare=False)  # tool calls per choice

    @property
    def completion_tokens(self) -> int:
        assert self.usage is not None
        return self.usage["completion_tokens"]


@dataclass
class Failure:
    """An error response: the HTTP status (200 for an SSE error event) and the envelope."""

    status: int
    error: dict[str, Any]
    texts: list[str] = field(default_factory=list)  # what streamed before the error
    finish: list[str | None] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)


def request(
    http: httpx.Client, stream: bool, *, endpoint: str = "chat", n: int = 1, **body: Any
) -> Outcome | Failure:
    """POST a chat (or completions) request and fold what comes back."""
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    payload: dict[str, Any] = {"n": n, **body}
    if endpoint == "chat":
        payload.setdefault("messages", MESSAGES)
    else:
        payload.setdefault("prompt", "hi")
    if not stream:
        resp = http.post(path, json=payload)
        data = resp.json()
        if resp.status_code != 200:
            return Failure(resp.status_code, data["error"])
        choices = sorted(data["choices"], key=lambda c: c["index"])
        assert [c["index"] for c in choices] == list(range(n))
        texts = [c["message"]["content"] if endpoint == "chat" else c["text"] for c in choices]
        return Outcome(
            texts,
            [c["finish_reason"] for c in choices],
            [c["stop_reason"] for c in choices],
            data["usage"],
            [len(c.get("message", {}).get("tool_calls") or []) for c in choices],
        )
    payload.update(stream=True, stream_options={"include_usage": True})
    texts = [""] * n
    finish: list[str | None] = [None] * n
    stop_reason: list[Any] = [None] * n
    calls = [0] * n
    usage = None
    error = None
    for event in sse_events(http, path, payload):  # [DONE] came last
        assert error is None, "nothing follows an error event but [DONE]"
        if "error" in event:
            error = event["error"]
            continue
        if not event["choices"]:
            usage = event["usage"]
            continue
        (choice,) = event["choices"]
        i = choice["index"]
        assert finish[i] is None, f"choice {i} sent a chunk after its finish_reason"
        if endpoint == "chat":
            texts[i] += choice["delta"].get("content") or ""
            calls[i] += len(choice["delta"].get("tool_calls") or [])
        else:
            texts[i] += choice["text"]
        if choice["finish_reason"] is not None:
            finish[i] = choice["finish_reason"]
            stop_reason[i] = choice["stop_reason"]
    if error is not None:
        return Failure(200, error, texts, finish, calls)
    assert usage is not None, "include_usage sends a usage chunk"
    return Outcome(texts, finish, stop_reason, usage, calls)


def sse_events(http: httpx.Client, path: str, payload: dict[str, Any]) -> list[Any]:
    with http.stream("POST", path, json=payload) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        return data_events(resp)


def token_id(server: Server, text: str) -> int:
    (tid,) = server.tokenize(text)
    return tid


def run(http: httpx.Client, stream: bool, **body: Any) -> Outcome:
    out = request(http, stream, **body)
    assert isinstance(out, Outcome), out
    return out


STREAM = pytest.mark.parametrize("stream", [False, True], ids=["aggregate", "stream"])


# -- min_tokens -----------------------------------------------------------------------


@STREAM
def test_min_tokens_suppresses_an_early_eos(
    http: httpx.Client, stream: bool, prompt_tokens: int
) -> None:
    # a, b, <|im_end|> (3rd token, below min_tokens=4: ordinary and hidden), c, d, EOS.
    out = run(http, stream, max_tokens=20, min_tokens=4, mock={"output": f"ab{IM_END}cd"})
    assert out == Outcome(["abcd"], ["stop"], [None])
    assert out.completion_tokens == 6
    assert out.usage["prompt_tokens"] == prompt_tokens


@STREAM
def test_eos_below_min_tokens_is_ordinary_text(http: httpx.Client, stream: bool) -> None:
    out = run(
        http,
        stream,
        max_tokens=20,
        min_tokens=4,
        skip_special_tokens=False,
        mock={"output": f"ab{IM_END}cd"},
    )
    assert out == Outcome([f"ab{IM_END}cd"], ["stop"], [None])  # the final EOS stays hidden
    assert out.completion_tokens == 6


@STREAM
def test_eos_at_exactly_min_tokens_ends_the_choice(http: httpx.Client, stream: bool) -> None:
    out = run(http, stream, max_tokens=20, min_tokens=3, mock={"output": f"ab{IM_END}cd"})
    assert out == Outcome(["ab"], ["stop"], [None])
    assert out.completion_tokens == 3


@STREAM
def test_min_tokens_suppresses_user_stop_token_ids(
    http: httpx.Client, server: Server, stream: bool
) -> None:
    call = token_id(server, "<tool_call>")
    script = "a<tool_call>b<tool_call>c"  # the 2nd token is below min_tokens, the 4th is not
    out = run(
        http, stream, max_tokens=20, min_tokens=3, stop_token_ids=[call], mock={"output": script}
    )
    assert out == Outcome(["a<tool_call>b"], ["stop"], [call])
    assert out.completion_tokens == 4


@STREAM
def test_min_tokens_suppresses_stop_strings(
    http: httpx.Client, server: Server, stream: bool
) -> None:
    # "x" is tokens 1 and 4; only the one at or past min_tokens=3 may stop.
    out = run(http, stream, max_tokens=20, min_tokens=3, stop=["x"], mock={"output": "xabxcd"})
    assert server.tokenize("xabxcd") == [token_id(server, c) for c in "xabxcd"]
    assert out == Outcome(["xab"], ["stop"], ["x"])
    assert out.completion_tokens == 4


# -- model EOS and user stop ids --------------------------------------------------------


@pytest.mark.parametrize("skip_special", [None, False])
@STREAM
def test_model_eos_ends_with_stop_and_its_text_never_shows(
    http: httpx.Client, server: Server, stream: bool, skip_special: bool | None, prompt_tokens: int
) -> None:
    extra = {} if skip_special is None else {"skip_special_tokens": skip_special}
    out = run(http, stream, max_tokens=50, mock={"output": "hello world", "end": "eos"}, **extra)
    assert out == Outcome(["hello world"], ["stop"], [None])
    assert out.completion_tokens == len(server.tokenize("hello world")) + 1  # the EOS counts
    assert out.usage["prompt_tokens"] == prompt_tokens
    assert out.usage["total_tokens"] == prompt_tokens + out.completion_tokens


@STREAM
def test_second_eos_id_in_the_text_ends_the_choice(http: httpx.Client, stream: bool) -> None:
    out = run(http, stream, max_tokens=20, mock={"output": f"ab{ENDOFTEXT}cd"})
    assert out == Outcome(["ab"], ["stop"], [None])
    assert out.completion_tokens == 3


@STREAM
def test_eos_id_also_in_user_stop_ids_reports_the_id(
    http: httpx.Client, server: Server, stream: bool
) -> None:
    im_end, eot = token_id(server, IM_END), token_id(server, ENDOFTEXT)
    out = run(http, stream, max_tokens=20, stop_token_ids=[im_end], mock={"output": "ab"})
    assert out == Outcome(["ab"], ["stop"], [im_end])
    assert out.completion_tokens == 3
    # Listing the other EOS id does not make this one the user's stop.
    out = run(http, stream, max_tokens=20, stop_token_ids=[eot], mock={"output": "ab"})
    assert out == Outcome(["ab"], ["stop"], [None])
    out = run(
        http, stream, max_tokens=20, stop_token_ids=[eot], mock={"output": f"ab{ENDOFTEXT}cd"}
    )
    assert out == Outcome(["ab"], ["stop"], [eot])


@STREAM
def test_hidden_eos_named_by_the_engine_reports_a_listed_id(
    http: httpx.Client, server: Server, stream: bool
) -> None:
    im_end = token_id(server, IM_END)
    out = run(
        http,
        stream,
        max_tokens=20,
        stop_token_ids=[im_end],
        mock={"output": "ab", "end": "eos_hidden"},
    )
    assert out == Outcome(["ab"], ["stop"], [im_end])
    assert out.completion_tokens == 2


@pytest.mark.parametrize("skip_special", [None, False])
@STREAM
def test_user_stop_token_id_added_token(
    http: httpx.Client, server: Server, stream: bool, skip_special: bool | None
) -> None:
    call = token_id(server, "<tool_call>")
    extra = {} if skip_special is None else {"skip_special_tokens": skip_special}
    script = "ab<tool_call>cd"
    out = run(http, stream, max_tokens=20, stop_token_ids=[call], mock={"output": script}, **extra)
    assert out == Outcome(["ab"], ["stop"], [call])
    assert out.completion_tokens == 3
    # Not listed, the same token is ordinary text.
    out = run(http, stream, max_tokens=20, mock={"output": script}, **extra)
    assert out == Outcome([script], ["stop"], [None])


@STREAM
def test_user_stop_token_id_ordinary_token(
    http: httpx.Client, server: Server, stream: bool
) -> None:
    script = "Hello world foo"
    tokens = server.tokenize(script)
    world = token_id(server, " world")
    assert world in tokens
    k = tokens.index(world)
    out = run(http, stream, max_tokens=20, stop_token_ids=[world], mock={"output": script})
    assert out == Outcome([server.detokenize(tokens[:k])], ["stop"], [world])
    assert " world" not in out.texts[0]
    assert out.completion_tokens == k + 1


# -- stop strings ---------------------------------------------------------------------


@STREAM
def test_stop_string_spanning_tokens(http: httpx.Client, server: Server, stream: bool) -> None:
    script = "go STOP now"
    assert len(server.tokenize("STOP")) > 1
    out = run(http, stream, max_tokens=20, stop=["STOP"], mock={"output": script})
    assert out == Outcome(["go "], ["stop"], ["STOP"])
    assert out.completion_tokens == len(server.tokenize("go STOP"))


@STREAM
def test_include_stop_str_in_output(http: httpx.Client, server: Server, stream: bool) -> None:
    out = run(
        http,
        stream,
        max_tokens=20,
        stop=["STOP"],
        include_stop_str_in_output=True,
        mock={"output": "go STOP now"},
    )
    assert out == Outcome(["go STOP"], ["stop"], ["STOP"])
    assert out.completion_tokens == len(server.tokenize("go STOP"))


@STREAM
def test_include_stop_str_across_multibyte_characters(
    http: httpx.Client, server: Server, stream: bool
) -> None:
    out = run(
        http,
        stream,
        max_tokens=30,
        stop=["東🙂"],
        include_stop_str_in_output=True,
        mock={"output": MULTIBYTE},
    )
    assert out == Outcome(["aé東🙂"], ["stop"], ["東🙂"])
    assert out.completion_tokens == len(server.tokenize("aé東🙂"))


@pytest.mark.parametrize("per_step", [1, 50])
@STREAM
def test_earliest_stop_string_in_the_text_wins(
    http: httpx.Client, server: Server, stream: bool, per_step: int
) -> None:
    script = "one two three four"
    out = run(
        http,
        stream,
        max_tokens=30,
        stop=["four", "three", "two"],
        mock={"output": script, "tokens_per_step": per_step},
    )
    assert out == Outcome(["one "], ["stop"], ["two"])
    assert out.completion_tokens == len(server.tokenize("one two"))


@STREAM
def test_held_prefix_of_a_stop_string_is_released_when_it_cannot_match(
    http: httpx.Client, stream: bool
) -> None:
    out = run(http, stream, max_tokens=30, stop=["STOP"], mock={"output": "STO STOX ST"})
    assert out == Outcome(["STO STOX ST"], ["stop"], [None])


MULTIBYTE = "aé東🙂b"


@pytest.mark.parametrize(
    ("stop", "expected"),
    [("東🙂", "aé"), ("🙂b", "aé東"), ("é", "a"), ("東X", MULTIBYTE), ("🙂", "aé東")],
)
@STREAM
def test_stop_string_across_multibyte_characters(
    http: httpx.Client, server: Server, stream: bool, stop: str, expected: str
) -> None:
    for ch in "é東🙂":  # every one of them is split over byte tokens by the test tokenizer
        assert len(server.tokenize(ch)) > 1
    out = run(http, stream, max_tokens=30, stop=[stop], mock={"output": MULTIBYTE})
    matched = expected != MULTIBYTE
    assert out == Outcome([expected], ["stop"], [stop if matched else None])


_ALPHABET = "ab é東🙂"


@settings(max_examples=25, deadline=None)
@given(
    text=st.text(alphabet=_ALPHABET, min_size=1, max_size=12),
    start=st.integers(0, 11),
    size=st.integers(1, 4),
    per_step=st.integers(1, 5),
    stream=st.booleans(),
)
def test_stop_string_property_any_split(
    http: httpx.Client, text: str, start: int, size: int, per_step: int, stream: bool
) -> None:
    """A stop string cut out of the text ends the choice before its first
    occurrence, however the tokens are grouped into engine messages."""
    start = min(start, len(text) - 1)
    stop = text[start : start + size]
    out = run(
        http, stream, max_tokens=60, stop=[stop], mock={"output": text, "tokens_per_step": per_step}
    )
    assert out == Outcome([text[: text.find(stop)]], ["stop"], [stop])


# -- length -------------------------------------------------------------------------


@STREAM
def test_max_tokens_ends_with_length_although_the_script_goes_on(
    http: httpx.Client, server: Server, stream: bool
) -> None:
    script = "one two three four five six"
    tokens = server.tokenize(script)
    assert len(tokens) > 4
    out = run(http, stream, max_tokens=4, mock={"output": script})
    assert out == Outcome([server.detokenize(tokens[:4])], ["length"], [None])
    assert out.completion_tokens == 4


@STREAM
def test_max_tokens_inside_a_multibyte_character_sends_no_half_character(
    http: httpx.Client, server: Server, stream: bool
) -> None:
    assert len(server.tokenize("a東")) == 3
    out = run(http, stream, max_tokens=2, mock={"output": "a東"})
    assert out == Outcome(["a"], ["length"], [None])
    assert out.completion_tokens == 2


@STREAM
def test_eos_on_the_last_allowed_token_is_still_eos(http: httpx.Client, stream: bool) -> None:
    out = run(http, stream, max_tokens=3, mock={"output": "ab"})
    assert out == Outcome(["ab"], ["stop"], [None])
    assert out.completion_tokens == 3


@STREAM
def test_engine_length_is_length(http: httpx.Client, server: Server, stream: bool) -> None:
    out = run(http, stream, max_tokens=20, mock={"output": "abc", "end": "length"})
    assert out == Outcome(["abc"], ["length"], [None])
    assert out.completion_tokens == len(server.tokenize("abc"))


# -- the engine's other end signals ---------------------------------------------------------


@STREAM
def test_hidden_eos_is_stop(http: httpx.Client, server: Server, stream: bool) -> None:
    out = run(http, stream, max_tokens=20, mock={"output": "abc", "end": "eos_hidden"})
    assert out == Outcome(["abc"], ["stop"], [None])
    assert out.completion_tokens == len(server.tokenize("abc"))  # nothing was emitted for the EOS


@pytest.mark.parametrize("end", ["stop", "eof"])
@STREAM
def test_bare_stop_and_eof_end_as_stop(
    http: httpx.Client, server: Server, stream: bool, end: str
) -> None:
    # A bare stop is TRANSPORT_EOF, not model EOS: the held "ST" (a prefix of
    # the user's stop string) is released, and no stop_reason is invented.
    out = run(http, stream, max_tokens=20, stop=["STOP"], mock={"output": "go ST", "end": end})
    assert out == Outcome(["go ST"], ["stop"], [None])
    assert out.completion_tokens == len(server.tokenize("go ST"))


@pytest.fixture(scope="module")
def beam_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A Beam model: with tools, a turn grammar is installed and MODEL_EOS is strict."""
    model = beam_model(tmp_path_factory.mktemp("beam"))
    with rotor_server(
        "out=mocker",
        "--model-path",
        str(model),
        "--tool-call-parser",
        "beam",
        "--speedup-ratio",
        "0",
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def beam(beam_server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=beam_server.url, timeout=30) as client:
        yield client


BEAM_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather.lookup",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
PARTIAL_CALL = ' to=weather.lookup<|channel|>analysis<|message|><rfl:parameter name="city">Par'


@pytest.mark.parametrize("end", ["eos", "eos_hidden", "stop", "eof"])
@STREAM
def test_bare_stop_is_not_model_eos(
    beam: httpx.Client, beam_server: Server, stream: bool, end: str
) -> None:
    """Observable under Beam's grammar: only a confirmed model EOS makes the
    parser strict, so a partial call is a request error after `eos` (emitted or
    only named) and is dropped leniently after a bare `stop` or `eof`."""
    out = request(
        beam,
        stream,
        tools=BEAM_TOOLS,
        max_tokens=100,
        mock={"output": PARTIAL_CALL, "end": end},
    )
    if end.startswith("eos"):
        assert isinstance(out, Failure), out
        assert out.status == (200 if stream else 500)
        assert "partial parameter" in out.error["message"]
        assert out.finish == ([None] if stream else [])
        assert out.calls == ([0] if stream else [])  # no partial call before the error
    else:
        assert out == Outcome([""], ["stop"], [None])
        assert out.calls == [0]
        assert out.completion_tokens == len(beam_server.tokenize(PARTIAL_CALL))


def test_engine_error_non_streaming_is_a_500_envelope(http: httpx.Client) -> None:
    out = request(http, False, max_tokens=20, mock={"output": "abc", "end": "error"})
    assert isinstance(out, Failure)
    assert out.status == 500
    assert out.error["type"] == "server_error"
    assert out.error["code"] == 500
    assert out.error["message"] == "internal server error"  # the details are for the log


def test_engine_error_streaming_is_an_error_event_then_done(http: httpx.Client) -> None:
    out = request(http, True, max_tokens=20, mock={"output": "abc", "end": "error"})
    assert isinstance(out, Failure)
    assert out.status == 200
    assert out.error["code"] == 500
    assert out.error["message"] == "internal server error"
    assert out.finish == [None]  # the failed choice never gets a finish_reason


# -- ignore_eos, skip_special_tokens ----------------------------------------------------


@pytest.mark.parametrize(
    ("skip_special", "text"), [(None, "abcd"), (False, f"ab{IM_END}cd{IM_END}")]
)
@STREAM
def test_ignore_eos_makes_eos_ordinary(
    http: httpx.Client, stream: bool, skip_special: bool | None, text: str
) -> None:
    extra = {} if skip_special is None else {"skip_special_tokens": skip_special}
    script = f"ab{IM_END}cd{IM_END}ef"
    out = run(http, stream, max_tokens=6, ignore_eos=True, mock={"output": script}, **extra)
    assert out == Outcome([text], ["length"], [None])
    assert out.completion_tokens == 6


@STREAM
def test_ignore_eos_on_seeded_output_runs_to_max_tokens(http: httpx.Client, stream: bool) -> None:
    out = run(http, stream, max_tokens=40, ignore_eos=True, seed=7)
    assert out.finish == ["length"]
    assert out.completion_tokens == 40


@pytest.mark.parametrize(
    ("skip_special", "text"), [(None, "ab"), (True, "ab"), (False, "a<|im_start|>b")]
)
@STREAM
def test_skip_special_tokens(
    http: httpx.Client, stream: bool, skip_special: bool | None, text: str
) -> None:
    extra = {} if skip_special is None else {"skip_special_tokens": skip_special}
    out = run(http, stream, max_tokens=20, mock={"output": "a<|im_start|>b"}, **extra)
    assert out == Outcome([text], ["stop"], [None])
    assert out.completion_tokens == 4


# -- n > 1 and usage ----------------------------------------------------------------------


@STREAM
def test_several_choices_end_differently_and_usage_sums(
    http: httpx.Client, server: Server, stream: bool, prompt_tokens: int
) -> None:
    outputs = ["abc STOP tail", "hello", "one two three four five six seven"]
    long = server.tokenize(outputs[2])
    limit = 8
    counted = [len(server.tokenize("abc STOP")), len(server.tokenize("hello")) + 1, limit]
    assert max(counted[:2]) < limit < len(long)
    out = run(http, stream, n=3, max_tokens=limit, stop=["STOP"], mock={"output": outputs})
    assert out == Outcome(
        ["abc ", "hello", server.detokenize(long[:limit])],
        ["stop", "stop", "length"],
        ["STOP", None, None],
    )
    assert out.completion_tokens == sum(counted)  # terminating tokens in, nothing after
    assert out.usage["prompt_tokens"] == prompt_tokens  # the prompt is counted once


@STREAM
def test_one_choice_error_fails_the_request(http: httpx.Client, stream: bool) -> None:
    out = request(http, stream, n=2, max_tokens=20, mock={"output": ["abc", "def"], "end": "error"})
    assert isinstance(out, Failure)
    assert out.status == (200 if stream else 500)


# -- completions take the same rules ----------------------------------------------------------


@STREAM
def test_completions_stop_rules(http: httpx.Client, server: Server, stream: bool) -> None:
    call = token_id(server, "<tool_call>")
    out = run(
        http,
        stream,
        endpoint="completions",
        n=2,
        max_tokens=20,
        stop=["東🙂"],
        stop_token_ids=[call],
        mock={"output": ["aé東🙂b", "x<tool_call>y"]},
    )
    assert out == Outcome(["aé", "x"], ["stop", "stop"], ["東🙂", call])
    assert out.completion_tokens == len(server.tokenize("aé東🙂")) + 2
