"""The prompt's logprobs as clients read them: vLLM's `prompt_logprobs` list
and the legacy completions `logprobs` of an echoed prompt (its first token
`null`, `text_offset` from the prompt's start); streamed, a choice's chunks
add up to what the whole response says, however its tokens are cut into
events."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.api.openai.completions import CompletionShaper, completion_body
from rotor.api.openai.logprobs import FLOOR, LegacyLogprobs, PromptAsk, listed
from rotor.frontend import StartedResponse
from rotor.model.card import ModelCard
from rotor.pipeline.collected import Collected
from rotor.pipeline.decode import End
from rotor.pipeline.events import ChoiceEvent, Finished, Usage
from rotor.pipeline.parse.base import Content
from rotor.pipeline.preprocess import Prepared
from rotor.pipeline.served import ServedModel
from rotor.protocol.engine import EngineRequest, PromptLogprob, TokenLogprob
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest

PROMPT = [10, 11, 12]
SCORED = [
    PromptLogprob(11, -0.25, 1, [(11, -0.25), (20, -2.0), (21, -3.0)]),
    PromptLogprob(12, float("-inf"), 7, [(30, -0.5), (31, -1.0), (32, -1.5)]),
]


def tt(token_id: int) -> str:
    """A token's text: its id in brackets (lengths vary: offsets are checked)."""
    return f"<{token_id}>"


async def _none():  # the events are fed by hand
    yield


def started(n: int = 1, prompt: list[int] = PROMPT) -> StartedResponse:
    request = EngineRequest("r", "m", prompt)
    prepared = Prepared([request] * n, [], len(prompt))
    return StartedResponse(
        "cmpl-x",
        ServedModel(ModelCard("m")),
        "m",
        7,
        n,
        Usage(),
        _none(),  # type: ignore[arg-type]
        token_text=tt,
        prepared=[prepared],
    )


def test_listed_is_vllm_s_shape() -> None:
    assert listed(SCORED, 2, tt) == [
        None,
        {  # the token first; an alternative that is the token is not repeated
            "11": {"logprob": -0.25, "rank": 1, "decoded_token": "<11>"},
            "20": {"logprob": -2.0, "rank": 2, "decoded_token": "<20>"},
        },
        {  # a token past the alternatives keeps its rank; -inf is sent as vLLM sends it
            "12": {"logprob": FLOOR, "rank": 7, "decoded_token": "<12>"},
            "30": {"logprob": -0.5, "rank": 1, "decoded_token": "<30>"},
            "31": {"logprob": -1.0, "rank": 2, "decoded_token": "<31>"},
        },
    ]
    assert listed(SCORED, 0, tt) == [
        None,
        {"11": {"logprob": -0.25, "rank": 1, "decoded_token": "<11>"}},
        {"12": {"logprob": FLOOR, "rank": 7, "decoded_token": "<12>"}},
    ]
    assert listed([], 3, tt) == [None]  # a prompt of one token
    assert listed(None, 3, tt) is None  # none came (a choice that failed)


def test_the_echoed_prompt_comes_first_with_a_null_for_its_first_token() -> None:
    out = LegacyLogprobs(tt)
    out.prompt(10, SCORED, 1)
    out.answer([TokenLogprob(40, -0.1, [(40, -0.1), (41, -2.5)])])
    assert out.body() == {
        "tokens": ["<10>", "<11>", "<12>", "<40>"],
        "token_logprobs": [None, -0.25, FLOOR, -0.1],
        "top_logprobs": [
            None,
            {"<11>": -0.25},
            {"<12>": FLOOR, "<30>": -0.5},
            {"<40>": -0.1, "<41>": -2.5},
        ],
        "text_offset": [0, 4, 8, 12],
    }
    assert out.end == 16


def test_a_generated_token_s_top_map_holds_the_token_itself() -> None:
    """OpenAI's rule: up to logprobs + 1 entries, the sampled token always among them."""
    out = LegacyLogprobs(tt, at=5)
    out.answer([TokenLogprob(40, -3.0, [(41, -0.1)]), TokenLogprob(42, -0.2)])
    assert out.body()["top_logprobs"] == [{"<40>": -3.0, "<41>": -0.1}, {"<42>": -0.2}]
    assert out.body()["text_offset"] == [5, 9]


def test_what_a_request_shows() -> None:
    def completions(**kw: Any) -> PromptAsk:
        return PromptAsk.of(CompletionRequest(prompt="x", **kw))

    assert completions() == PromptAsk(None, None, False)
    assert completions(echo=True, logprobs=2) == PromptAsk(2, None, True)
    assert completions(logprobs=2) == PromptAsk(None, None, True)
    assert completions(prompt_logprobs=3) == PromptAsk(None, 3, False)
    assert completions(echo=True, logprobs=1, stream=True) == PromptAsk(1, None, True)
    assert completions(prompt_logprobs=0, stream=True) == PromptAsk(None, None, False)
    chat = ChatCompletionRequest(messages=[{"role": "user", "content": "x"}], prompt_logprobs=2)
    assert PromptAsk.of(chat) == PromptAsk(None, 2, False)

    # what the engine is asked for: the most either needs; a stream, echo's alone
    def wanted(**kw: Any) -> int | None:
        return CompletionRequest(prompt="x", **kw).prompt_logprobs_wanted()

    assert wanted(echo=True, logprobs=5, prompt_logprobs=2) == 5
    assert wanted(echo=True, logprobs=1, prompt_logprobs=4) == 4
    assert wanted(echo=True, logprobs=1, prompt_logprobs=0, stream=True) == 1
    assert wanted(logprobs=1) is None
    assert wanted(prompt_logprobs=0, stream=True) is None
    assert chat.prompt_logprobs_wanted() == 2


def events_of(
    lps: list[TokenLogprob], cuts: list[int], scored: list[PromptLogprob]
) -> list[ChoiceEvent]:
    """One choice's answer cut into events at `cuts`: each event's text is its
    tokens' texts; the first carries the prompt's logprobs, the last the finish."""
    bounds = sorted({0, len(lps), *(c % (len(lps) + 1) for c in cuts)})
    out = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        part = lps[a:b]
        out.append(ChoiceEvent(0, [Content("".join(tt(lp.token_id) for lp in part))], part))
    if not out:
        out.append(ChoiceEvent(0, [], []))
    out[0].prompt_logprobs = scored
    out[-1].finished = Finished("length", None, End.LENGTH)
    return out


token_logprobs = st.lists(
    st.builds(
        TokenLogprob,
        st.integers(0, 999),
        st.floats(-20, 0),
        st.lists(st.tuples(st.integers(0, 999), st.floats(-20, 0)), max_size=2),
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(token_logprobs, st.lists(st.integers(0, 8), max_size=4), st.integers(0, 3))
def test_streamed_chunks_add_up_to_the_whole_response(
    lps: list[TokenLogprob], cuts: list[int], top: int
) -> None:
    resp = started()
    ask = PromptAsk(echo=top, answer=True)
    evs = events_of(lps, cuts, SCORED)
    shaper = CompletionShaper(resp, echo=["PROMPT"], ask=ask)
    streamed: dict[str, list[Any]] = {
        "tokens": [],
        "token_logprobs": [],
        "top_logprobs": [],
        "text_offset": [],
    }
    text = []
    for ev in evs:
        for chunk in shaper.event(ev):
            (choice,) = chunk["choices"]
            text.append(choice["text"])
            for key, values in streamed.items():
                values.extend(choice["logprobs"][key])
    collected = Collected()
    for ev in evs:
        collected.add(ev)
    whole = completion_body(resp, [collected], ["PROMPT"], 1, ask=ask)["choices"][0]
    assert streamed == whole["logprobs"]
    assert "".join(text) == whole["text"]
    assert whole["text"].startswith("PROMPT")
    assert whole["logprobs"]["tokens"][: len(PROMPT)] == [tt(t) for t in PROMPT]
    assert whole["logprobs"]["token_logprobs"][0] is None
    assert "prompt_logprobs" not in whole  # (not asked by that field)


def test_each_choice_of_each_prompt_gets_its_own_prompt_s() -> None:
    resp = started(n=2)
    ask = PromptAsk(echo=None, listed=1, answer=False)
    choices = []
    for scored in (SCORED, SCORED[:1]):
        c = Collected()
        c.add(ChoiceEvent(0, [Content("a")], [], Finished("stop", None, End.MODEL_EOS)))
        c.prompt_logprobs = scored
        choices.append(c)
    body = completion_body(resp, choices, None, 2, ask=ask)
    assert [c["logprobs"] for c in body["choices"]] == [None, None]  # not asked
    assert [c["prompt_logprobs"] for c in body["choices"]] == [
        listed(SCORED, 1, tt),
        listed(SCORED[:1], 1, tt),
    ]
