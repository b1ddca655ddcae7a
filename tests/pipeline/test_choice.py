"""ChoicePipeline: decode → MessageParser (hermes) → finish_reason, with the
built-in ChatML model's real tokenizer and EOS ids (docs/stops-and-eos.md,
"finish_reason and stop_reason"; docs/beam.md, "Ending a turn")."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.model.builtin import builtin_test_model
from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.decode import ChoiceDecoder, End
from rotor.pipeline.events import Failure
from rotor.pipeline.parse.base import Content, Piece, Reasoning, ToolCall, Tools
from rotor.pipeline.parse.constrained import NamedToolParser
from rotor.pipeline.parse.message import MessageParser
from rotor.pipeline.parse.tools import tool_parser
from rotor.protocol.engine import EngineOutput, Finish, StopParams

from support.parsing import fold
from support.scripts import hermes

CARD, TOK = builtin_test_model()
IM_END = TOK.token_to_id("<|im_end|>")
ENDOFTEXT = TOK.token_to_id("<|endoftext|>")
assert IM_END is not None and ENDOFTEXT is not None
TOOLS = {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}}
CALL = hermes("get_weather", {"city": "Paris"}, newlines=True)
PREAMBLE = "Let me check."


def pipeline(
    *,
    max_tokens: int = 1000,
    stop: Sequence[str] | None = None,
    stop_ids: Sequence[int] = (),
    named: bool = False,
    tools: bool = True,
) -> ChoicePipeline:
    """One choice as preprocess builds it for the ChatML model with hermes tools."""
    params = StopParams(
        max_tokens=max_tokens, stop_token_ids=list(stop_ids), eos_token_ids=list(CARD.eos_token_ids)
    )
    decoder = ChoiceDecoder(
        params,
        list(stop) if stop else None,
        decoder=TOK.decoder(True),
        token_text=lambda ids: TOK.decode(ids, skip_special_tokens=False),
    )
    declared = Tools(TOOLS)
    if named:
        parser = MessageParser(tools=NamedToolParser(declared, "get_weather"))
    elif tools:
        parser = MessageParser(tools=tool_parser("hermes")(declared))
    else:
        parser = MessageParser()
    return ChoicePipeline(0, decoder, parser, named_tool=named)


def outputs(
    ids: Sequence[int], per: int = 1, finish: Finish | None = None, matched: int | None = None
) -> list[EngineOutput]:
    outs = [EngineOutput(token_ids=list(ids[i : i + per])) for i in range(0, len(ids), per)]
    if finish is not None:
        outs.append(EngineOutput(finish=finish, matched=matched))
    return outs


def drive(pipe: ChoicePipeline, outs: Sequence[EngineOutput], close: bool = True) -> list[Piece]:
    pieces: list[Piece] = []
    for out in outs:
        pieces += pipe.feed(out)
    if close and pipe.finished is None:
        pieces += pipe.close()
    return pieces


def merged(pieces: Sequence[Piece]) -> list[tuple[str, str]]:
    """Pieces with adjacent text joined and call ids dropped (ids are random)."""
    out: list[tuple[str, str]] = []
    for p in pieces:
        if isinstance(p, ToolCall):
            out.append(("call", f"{p.name}:{json.loads(p.arguments)}"))
            continue
        kind = "content" if isinstance(p, Content) else "reasoning"
        assert isinstance(p, (Content, Reasoning))
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + p.text)
        else:
            out.append((kind, p.text))
    return out


PARIS = [("get_weather", {"city": "Paris"})]


# -- finish_reason ----------------------------------------------------------------------


@pytest.mark.parametrize("eos", [IM_END, ENDOFTEXT])
def test_completed_call_then_model_eos_is_tool_calls(eos: int) -> None:
    pipe = pipeline()
    ids = TOK.encode(PREAMBLE + " " + CALL)
    pieces = drive(pipe, outputs([*ids, eos, *TOK.encode("junk")], per=3))
    assert fold(pieces).calls == PARIS
    assert (fold(pieces).content or "").strip() == PREAMBLE
    f = pipe.finished
    assert f is not None
    assert (f.finish_reason, f.end, f.stop_reason, f.failure) == (
        "tool_calls",
        End.MODEL_EOS,
        None,
        None,
    )
    assert pipe.decoder.tokens == len(ids) + 1


def test_plain_text_model_eos_is_stop() -> None:
    pipe = pipeline()
    ids = TOK.encode("Hello, world!")
    pieces = drive(pipe, outputs([*ids, IM_END]))
    assert merged(pieces) == [("content", "Hello, world!")]
    assert pipe.finished is not None and pipe.finished.finish_reason == "stop"
    assert pipe.calls == 0


def test_unterminated_complete_call_at_transport_eof_is_recovered_as_tool_calls() -> None:
    """Lenient finish (docs/beam.md B5): a complete body without its end marker."""
    pipe = pipeline()
    ids = TOK.encode(CALL.removesuffix("</tool_call>"))
    pieces = drive(pipe, outputs(ids, per=4))
    assert fold(pieces).calls == PARIS
    f = pipe.finished
    assert f is not None and f.end is End.TRANSPORT_EOF and f.finish_reason == "tool_calls"


def test_bare_engine_stop_is_transport_eof_not_model_eos() -> None:
    pipe = pipeline()
    pieces = drive(pipe, outputs(TOK.encode(CALL), per=5, finish="stop"))
    assert fold(pieces).calls == PARIS
    f = pipe.finished
    assert f is not None and f.end is End.TRANSPORT_EOF and f.finish_reason == "tool_calls"


@pytest.mark.parametrize("how", ["ours", "engine"])
def test_length_is_never_rewritten(how: str) -> None:
    ids = TOK.encode(CALL)
    if how == "ours":
        pipe = pipeline(max_tokens=len(ids))
        pieces = drive(pipe, outputs([*ids, *TOK.encode("more")], per=2))
    else:
        pipe = pipeline()
        pieces = drive(pipe, outputs(ids, per=2, finish="length"))
    assert fold(pieces).calls == PARIS, "the completed call is still delivered"
    f = pipe.finished
    assert f is not None and f.end is End.LENGTH and f.finish_reason == "length"
    assert pipe.decoder.tokens == len(ids)


def test_length_cutting_a_call_leaves_no_call_and_length() -> None:
    ids = TOK.encode(PREAMBLE + CALL)
    pipe = pipeline(max_tokens=len(ids) - 6)
    pieces = drive(pipe, outputs(ids))
    assert fold(pieces).calls == []
    assert pipe.finished is not None and pipe.finished.finish_reason == "length"


def test_named_tool_choice_is_stop_with_its_call() -> None:
    pipe = pipeline(named=True)
    pieces = drive(pipe, outputs([*TOK.encode('{"city": "Paris"}'), IM_END], per=3))
    assert fold(pieces).calls == PARIS
    f = pipe.finished
    assert f is not None and f.finish_reason == "stop" and f.end is End.MODEL_EOS
    assert pipe.calls == 1


def test_stop_string_cutting_the_call_leaves_content_and_stop() -> None:
    """docs/beam.md B14 in hermes shape: the stop string cuts the call's text."""
    pipe = pipeline(stop=["Paris"])
    pieces = drive(pipe, outputs(TOK.encode(PREAMBLE + CALL), per=2))
    assert fold(pieces).calls == []
    f = pipe.finished
    assert f is not None and f.end is End.USER_STOP_STRING
    assert (f.finish_reason, f.stop_reason) == ("stop", "Paris")
    assert "Paris" not in (fold(pieces).content or "")


def test_user_stop_reasons_pass_through() -> None:
    stop_id = TOK.encode("!")[0]
    pipe = pipeline(stop_ids=[stop_id])
    drive(pipe, outputs(TOK.encode("Hi! there")))
    f = pipe.finished
    assert f is not None and f.end is End.USER_STOP_TOKEN
    assert (f.finish_reason, f.stop_reason) == ("stop", stop_id)
    pipe = pipeline(stop_ids=[IM_END])
    drive(pipe, outputs([*TOK.encode("Hi"), IM_END]))
    f = pipe.finished
    assert f is not None and f.end is End.MODEL_EOS and f.stop_reason == IM_END


def test_completed_call_then_a_stop_string_is_tool_calls() -> None:
    """The rule ChoicePipeline applies: tool_calls whenever a call completed and
    the End is not LENGTH (named tool aside)."""
    pipe = pipeline(stop=["Done"])
    pieces = drive(pipe, outputs(TOK.encode(CALL + "\nDone."), per=4))
    assert fold(pieces).calls == PARIS
    f = pipe.finished
    assert f is not None and f.end is End.USER_STOP_STRING
    assert (f.finish_reason, f.stop_reason) == ("tool_calls", "Done")


# -- errors and cancellation ------------------------------------------------------------


@pytest.mark.parametrize("same_output", [True, False])
def test_engine_error_sets_error_and_yields_no_pieces(same_output: bool) -> None:
    pipe = pipeline()
    ids = TOK.encode(CALL)
    before = drive(pipe, outputs(ids[:-3]), close=False)
    tail = EngineOutput(token_ids=ids[-3:], finish="error", error="worker died")
    if same_output:
        last = pipe.feed(tail)
    else:
        assert fold(pipe.feed(EngineOutput(token_ids=ids[-3:]))).calls == PARIS
        last = pipe.feed(EngineOutput(finish="error", error="worker died"))
    assert last == []
    assert fold(before).calls == []
    f = pipe.finished
    assert f is not None and f.end is End.ERROR
    assert f.failure == Failure("internal", "worker died")
    assert pipe.decoder.tokens == len(ids)


@pytest.mark.parametrize(
    ("kind", "failure"),
    [(End.ERROR, Failure("internal", "engine error")), (End.CANCELLED, None)],
)
def test_close_with_error_or_cancel(kind: End, failure: Failure | None) -> None:
    pipe = pipeline()
    drive(pipe, outputs(TOK.encode("Hello")), close=False)
    assert pipe.close(kind) == []
    f = pipe.finished
    assert f is not None and f.end is kind and f.failure == failure
    assert pipe.close() == [] and pipe.finished is f


def test_close_error_keeps_its_failure() -> None:
    pipe = pipeline()
    failure = Failure("unavailable", "worker gone")
    assert pipe.close(End.ERROR, failure) == []
    assert pipe.finished is not None and pipe.finished.failure == failure


# -- exactly one End --------------------------------------------------------------------


def test_output_after_the_end_changes_nothing() -> None:
    pipe = pipeline()
    pieces = drive(pipe, outputs([*TOK.encode(CALL), IM_END]), close=False)
    f = pipe.finished
    assert f is not None and fold(pieces).calls == PARIS
    assert pipe.feed(EngineOutput(token_ids=TOK.encode(CALL), finish="length")) == []
    assert pipe.close() == []
    assert pipe.finished is f, "the End is decided once"
    assert pipe.calls == 1 and pipe.decoder.tokens == len(TOK.encode(CALL)) + 1


# -- any split, same message ------------------------------------------------------------

MESSAGES = [
    "Hello, world! How are you today?",
    PREAMBLE + " " + CALL,
    CALL + "\n" + CALL.replace("Paris", "Montréal"),
    "Montréal 🙂 " + CALL.removesuffix("</tool_call>"),
    "<tool_call>\nnot json\n</tool_call> 東京",
]


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(MESSAGES),
    st.lists(st.integers(1, 6), min_size=1, max_size=8),
    st.sampled_from(["eos", "close", "length", "stop_string"]),
)
def test_any_split_gives_the_same_message(message: str, sizes: list[int], end: str) -> None:
    ids = TOK.encode(message)

    def run(split: list[int]) -> tuple[list[tuple[str, str]], tuple]:
        pipe = pipeline(
            max_tokens=len(ids) - 2 if end == "length" else 1000,
            stop=["Mont"] if end == "stop_string" else None,
        )
        outs, i, k = [], 0, 0
        tail = [IM_END] if end == "eos" else []
        stream = [*ids, *tail]
        while i < len(stream):
            n = split[k % len(split)]
            outs.append(EngineOutput(token_ids=stream[i : i + n]))
            i, k = i + n, k + 1
        pieces = drive(pipe, outs)
        f = pipe.finished
        assert f is not None
        return merged(pieces), (f.finish_reason, f.stop_reason, f.end, pipe.decoder.tokens)

    assert run(sizes) == run([len(ids) + 1]) == run([1])
