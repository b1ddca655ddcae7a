"""protocol/engine.py's merge_outputs: outputs piled up for a consumer that
fell behind (a transport's stream, a pulled reader) merge into one per
choice, up to its finish."""

from __future__ import annotations

from rotor.protocol.engine import EngineOutput, merge_outputs


def test_piled_up_outputs_merge_per_choice() -> None:
    outs = [
        EngineOutput(0, [1], cached_tokens=5),
        EngineOutput(0, [2, 3]),
        EngineOutput(0, [4], finish="eos", matched=4),
        EngineOutput(0, [9]),
    ]
    merged = merge_outputs(outs)
    assert [(o.token_ids, o.finish, o.cached_tokens) for o in merged] == [
        ([1, 2, 3, 4], "eos", 5),
        ([9], None, None),
    ]
    text = [EngineOutput(0, text="a"), EngineOutput(0, text="b")]
    assert len(merge_outputs(text)) == 2  # text-out outputs are one token each
