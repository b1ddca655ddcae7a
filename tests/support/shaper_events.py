"""Choice events for the shapers' property tests (api/test_shaper_frames.py,
api/test_streamed.py): `events(max_index)` draws a stream's events — text of
any characters, reasoning, tool calls, finishes, several choices — weighted
towards the common one, a lone text piece with no finish (what the shapers'
`frames` fast path takes); `started` is a response to shape them for."""

from __future__ import annotations

from hypothesis import strategies as st

from rotor.frontend import StartedResponse
from rotor.model.card import ModelCard
from rotor.pipeline.decode import End
from rotor.pipeline.events import ChoiceEvent, Finished, Usage
from rotor.pipeline.parse.base import Content, Reasoning, ToolCall
from rotor.pipeline.served import ServedModel


async def _none():  # the events are fed by hand
    yield


def started(n: int = 1, model: str = "m") -> StartedResponse:
    return StartedResponse(
        "chatcmpl-x", ServedModel(ModelCard(model)), model, 7, n, Usage(), _none()
    )


texts = st.text(max_size=12)
pieces = st.lists(
    st.one_of(
        texts.map(Content),
        texts.map(Reasoning),
        st.builds(
            ToolCall,
            name=st.sampled_from(["f", "g"]),
            arguments=st.just("{}"),
            id=st.just("call_1"),
        ),
    ),
    max_size=3,
)
finishes = st.one_of(
    st.none(),
    st.sampled_from(["stop", "length", "tool_calls"]).map(
        lambda r: Finished(r, None, End.MODEL_EOS)
    ),
)


def events(max_index: int) -> st.SearchStrategy[list[ChoiceEvent]]:
    index = st.integers(0, max_index)
    one = st.one_of(
        # nearly every token: a lone text piece, no finish (the fast path's case)
        st.builds(ChoiceEvent, index, texts.map(lambda t: [Content(t)]), st.just([]), st.none()),
        st.builds(ChoiceEvent, index, pieces, st.just([]), finishes),
    )
    return st.lists(one, max_size=25)
