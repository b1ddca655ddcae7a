"""The frames between HTTP processes and the engine process: any split of the
byte stream reads as the same frames; merged outputs keep every token."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.protocol.engine import EngineOutput, EngineState, TokenLogprob
from rotor.protocol.engine import merge_outputs as merge
from rotor.runtime.socket import frames as wire

frames = st.lists(
    st.tuples(
        st.sampled_from([wire.GENERATE, wire.ABORT, wire.STATE, wire.OUTPUTS, wire.ERROR]),
        st.integers(min_value=0, max_value=2**32 - 1),
        st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255),
        st.binary(max_size=300),
    ),
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(frames, st.lists(st.integers(min_value=0, max_value=4000), max_size=10))
def test_any_split_reads_the_same_frames(items: list, cuts: list[int]) -> None:
    data = b"".join(wire.frame(kind, rid, payload, seq) for kind, seq, rid, payload in items)
    got: list[tuple[bytes, int, str, bytes]] = []
    reader = wire.Reader(lambda kind, seq, rid, payload: got.append((kind, seq, rid, payload)))
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    for a, b in zip(points, points[1:], strict=False):
        reader.feed(data[a:b])
    assert got == items


def test_a_frame_of_an_unknown_kind_is_an_error() -> None:
    reader = wire.Reader(lambda *_: None)
    with pytest.raises(wire.WireError, match="unknown frame kind"):
        reader.feed((7).to_bytes(4, "big") + b"Z\x00\x00\x00\x00\x00x")


def test_state_round_trips() -> None:
    state = EngineState(active_requests=3, running=2, tokens_generated=99, simulated_ms=1.5)
    assert wire.decode_state(wire.encode_state(state)) == state


def test_merge_joins_token_outputs_of_a_choice_and_keeps_the_finish() -> None:
    outs = [
        EngineOutput(index=0, token_ids=[1], cached_tokens=4),
        EngineOutput(index=0, token_ids=[2, 3]),
        EngineOutput(index=1, token_ids=[7]),
        EngineOutput(index=1, token_ids=[8], finish="eos", matched=8),
        EngineOutput(index=0, token_ids=[4], finish="length"),
    ]
    got = merge(outs)
    assert [(o.index, o.token_ids, o.finish) for o in got] == [  # one output per choice
        (0, [1, 2, 3, 4], "length"),
        (1, [7, 8], "eos"),
    ]
    assert got[0].cached_tokens == 4 and got[1].matched == 8


def test_merge_keeps_text_outputs_and_logprobs_apart_where_they_differ() -> None:
    lp = [TokenLogprob(5, -0.1)]
    outs = [
        EngineOutput(index=0, text="a"),
        EngineOutput(index=0, text="b"),
        EngineOutput(index=0, token_ids=[5], logprobs=lp),
        EngineOutput(index=0, token_ids=[6]),
    ]
    assert len(merge(outs)) == 4
