"""tool_choice, the Beam turn grammar and the decoder defaults that preprocess decides.

`prepare_chat` is driven directly with real models (the built-in ChatML model
for hermes, a Beam model directory) and its ChoicePipeline is fed real engine
outputs, so what is checked is what a request would get. The same requests
through HTTP: tests/e2e/test_tool_choice_http.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from rotor.model.builtin import builtin_test_model
from rotor.model.card import ModelCard
from rotor.model.loader import load_model
from rotor.model.tokenizer import Tokenizer
from rotor.pipeline import grammar
from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.decode import End
from rotor.pipeline.errors import RequestError
from rotor.pipeline.parse.base import Piece, Tools
from rotor.pipeline.preprocess import Prepared, prepare_chat
from rotor.pipeline.served import ServedModel
from rotor.pipeline.tool_choice import check_tool_choice
from rotor.protocol.engine import EngineOutput
from rotor.protocol.openai import ChatCompletionRequest

from support.models import beam_model, harmony_model
from support.parsing import fold
from support.scripts import hermes
from support.tool_choice import INCONSISTENT, MESSAGES, NAMED, TOOLS, WEATHER

DECLARED = Tools.from_openai(TOOLS)

HERMES_CALL = hermes("get_weather", {"city": "Paris"}, newlines=True)
HERMES_CALL_2 = hermes("get_time", {"zone": "CET"}, newlines=True)

BEAM_HEADER = " to=get_weather<|channel|>analysis <|constrain|>xml<|message|>"
BEAM_PARIS = BEAM_HEADER + '<rfl:parameter name="city">Paris</rfl:parameter>'
BEAM_PARTIAL = BEAM_HEADER + '<rfl:parameter name="city">Par'


# -- models -----------------------------------------------------------------------------


def chatml(parser: str = "hermes", structural_tags: bool = True) -> ServedModel:
    """The built-in ChatML model with `parser` as its tool parser (no reasoning parser)."""
    card, tok = builtin_test_model()
    return _served(card, tok, parser, structural_tags)


def _served(card: ModelCard, tok: Tokenizer, parser: str, structural_tags: bool) -> ServedModel:
    caps = dataclasses.replace(card.capabilities, structural_tags=structural_tags)
    card = dataclasses.replace(card, capabilities=caps, reasoning_parser=None)
    return ServedModel.build(card, tok, tool_parser_name=parser)


@pytest.fixture(scope="module")
def beam_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return beam_model(tmp_path_factory.mktemp("beam"))


def beam(beam_dir: Path, structural_tags: bool = True) -> ServedModel:
    card, tok = load_model(beam_dir)
    return _served(card, tok, "beam", structural_tags)


def request(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": MESSAGES, **fields})


def prepare(model: ServedModel, **fields: Any) -> Prepared:
    return prepare_chat(model, request(**fields), "req-1")


# -- driving a choice ----------------------------------------------------------------------


def play(
    model: ServedModel, choice: ChoicePipeline, text: str, end: str = "eos", per_step: int = 1
) -> list[Piece]:
    """Feed `text` as the engine would (ids, `per_step` a message), then the End:
    eos → the model's EOS id as the last token; length / stop → that finish."""
    tok = model.tokenizer
    assert tok is not None
    ids = tok.encode(text)
    eos = model.card.eos_token_ids[0]
    if end == "eos":
        ids = ids + [eos]
    pieces: list[Piece] = []
    for at in range(0, len(ids), per_step):
        last = at + per_step >= len(ids)
        out = EngineOutput(index=choice.index, token_ids=ids[at : at + per_step])
        if last:
            out.finish = "eos" if end == "eos" else end  # type: ignore[assignment]
            out.matched = eos if end == "eos" else None
        pieces.extend(choice.feed(out))
        if choice.finished is not None:
            break
    assert choice.finished is not None
    return pieces


# -- tool_choice ---------------------------------------------------------------------------


def test_tool_choice_none_leaves_tools_out_and_parses_nothing() -> None:
    model = chatml()
    prepared = prepare(model, tools=TOOLS, tool_choice="none")
    assert prepared.prompt_text is not None
    assert "get_weather" not in prepared.prompt_text and "<tools>" not in prepared.prompt_text
    assert prepared.requests[0].sampling.guided is None
    assert prepared.requests[0].stop.visible_stop_token_ids == []
    choice = prepared.choices[0]
    pieces = play(model, choice, HERMES_CALL)
    assert fold(pieces).calls == []
    assert fold(pieces).content == HERMES_CALL  # the markup stays content, verbatim
    assert choice.finished is not None and choice.finished.finish_reason == "stop"


@pytest.mark.parametrize("tool_choice", [None, "auto"])
def test_tool_choice_auto_renders_tools_and_parses_calls(tool_choice: str | None) -> None:
    model = chatml()
    fields: dict[str, Any] = {"tools": TOOLS}
    if tool_choice is not None:
        fields["tool_choice"] = tool_choice
    prepared = prepare(model, **fields)
    assert prepared.prompt_text is not None
    assert "get_weather" in prepared.prompt_text and "<tools>" in prepared.prompt_text
    assert prepared.requests[0].sampling.guided is None  # auto: no constraint for hermes
    choice = prepared.choices[0]
    pieces = play(model, choice, HERMES_CALL)
    assert fold(pieces).calls == [("get_weather", {"city": "Paris"})]
    assert fold(pieces).content is None
    assert choice.finished is not None and choice.finished.finish_reason == "tool_calls"


@pytest.mark.parametrize("structural_tags", [True, False])
def test_tool_choice_required_constrains_when_the_engine_can(structural_tags: bool) -> None:
    model = chatml(structural_tags=structural_tags)
    prepared = prepare(model, tools=TOOLS, tool_choice="required")
    expected = (
        grammar.tool_choice_guided(DECLARED, check_tool_choice("required", DECLARED))
        if structural_tags
        else None
    )
    assert prepared.requests[0].sampling.guided == expected
    if structural_tags:
        guided = prepared.requests[0].sampling.guided
        assert guided is not None and guided["json_schema"]["minItems"] == 1
    assert prepared.prompt_text is not None and "get_weather" in prepared.prompt_text
    # Under the constraint the model writes the JSON array it forces, not the
    # family's markup; without it, the family's own markup.
    forced = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'
    pieces = play(model, prepared.choices[0], forced if structural_tags else HERMES_CALL)
    assert fold(pieces).calls == [("get_weather", {"city": "Paris"})]
    choice = prepared.choices[0]
    assert choice.finished is not None and choice.finished.finish_reason == "tool_calls"


def test_required_constraint_output_that_is_not_calls_stays_content() -> None:
    model = chatml(structural_tags=True)
    prepared = prepare(model, tools=TOOLS, tool_choice="required")
    pieces = play(model, prepared.choices[0], "no calls, sorry")
    assert fold(pieces).calls == [] and fold(pieces).content == "no calls, sorry"


def test_harmony_named_choice_gets_no_bare_json_constraint(tmp_path: Path) -> None:
    # harmony frames its own output in channels: a bare-arguments constraint
    # would force text its parser cannot read, so none is installed.
    card, tok = load_model(harmony_model(tmp_path))
    card.capabilities.structural_tags = True
    model = ServedModel.build(card, tok, tool_parser_name="harmony")
    for choice in ("required", NAMED):
        prepared = prepare(model, tools=TOOLS, tool_choice=choice)
        assert prepared.requests[0].sampling.guided is None


HARMONY_ANALYSIS = "<|channel|>analysis<|message|>Need the weather.<|end|>"
HARMONY_CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}<|call|>'
)


@pytest.mark.parametrize(
    "fields",
    [{}, {"tools": TOOLS, "tool_choice": "none"}, {"tools": TOOLS}],
    ids=["no-tools", "none", "auto"],
)
def test_harmony_calls_except_under_none(tmp_path: Path, fields: dict[str, Any]) -> None:
    """Under `none` harmony still frames channels, but nothing may be called:
    the call segment's body is content, and no call is returned. Without tools
    the call is returned (to an undeclared tool); with them, as ever."""
    card, tok = load_model(harmony_model(tmp_path))
    model = ServedModel.build(card, tok, tool_parser_name="harmony")
    prepared = prepare(model, **fields)
    active = "tools" in fields and "tool_choice" not in fields
    assert prepared.prompt_text is not None
    assert ("get_weather" in prepared.prompt_text) is active
    choice = prepared.choices[0]
    msg = fold(play(model, choice, HARMONY_ANALYSIS + HARMONY_CALL))
    assert msg.reasoning == "Need the weather."
    assert choice.finished is not None
    if fields.get("tool_choice") != "none":
        assert (msg.calls, msg.content) == ([("get_weather", {"city": "Paris"})], None)
        assert choice.finished.finish_reason == "tool_calls"
    else:
        assert (msg.calls, msg.content) == ([], '{"city": "Paris"}')
        assert choice.finished.finish_reason == "stop"


@pytest.mark.parametrize("structural_tags", [True, False])
def test_named_tool_choice_makes_the_output_one_call(structural_tags: bool) -> None:
    model = chatml(structural_tags=structural_tags)
    prepared = prepare(model, tools=TOOLS, tool_choice=NAMED)
    if structural_tags:
        assert prepared.requests[0].sampling.guided == {
            "type": "json_schema",
            "json_schema": WEATHER,
        }
        assert prepared.requests[0].sampling.guided == grammar.tool_choice_guided(
            DECLARED, check_tool_choice(NAMED, DECLARED)
        )
    else:
        assert prepared.requests[0].sampling.guided is None
    assert prepared.prompt_text is not None and "get_weather" in prepared.prompt_text
    choice = prepared.choices[0]
    pieces = play(model, choice, '{"city": "Paris", "days": 2}', per_step=3)
    assert fold(pieces).calls == [("get_weather", {"city": "Paris", "days": 2})]
    assert fold(pieces).content is None
    assert choice.finished is not None and choice.finished.finish_reason == "stop"


@pytest.mark.parametrize("parallel", [True, False])
def test_parallel_tool_calls_false_returns_at_most_one_call(parallel: bool) -> None:
    model = chatml()
    prepared = prepare(model, tools=TOOLS, parallel_tool_calls=parallel)
    pieces = play(model, prepared.choices[0], HERMES_CALL + "\n" + HERMES_CALL_2)
    got = fold(pieces).calls
    if parallel:
        assert got == [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]
    else:
        assert got == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("fields", [f for _, f in INCONSISTENT], ids=[i for i, _ in INCONSISTENT])
@pytest.mark.parametrize("parser", ["hermes", "beam"])
def test_inconsistent_tool_choice_is_a_400(
    fields: dict[str, Any], parser: str, beam_dir: Path
) -> None:
    model = chatml() if parser == "hermes" else beam(beam_dir)
    with pytest.raises(RequestError) as info:
        prepare(model, **fields)
    assert info.value.param == "tool_choice"


# -- Beam: grammar, visible stops, retained EOS ------------------------------------------------


@pytest.mark.parametrize("structural_tags", [True, False])
@pytest.mark.parametrize("turn_grammar", [None, True, False])
def test_beam_grammar_installed_only_when_the_engine_accepts_it_and_not_opted_out(
    beam_dir: Path, structural_tags: bool, turn_grammar: bool | None
) -> None:
    model = beam(beam_dir, structural_tags)
    fields: dict[str, Any] = {"tools": TOOLS}
    if turn_grammar is not None:
        fields["turn_grammar"] = turn_grammar
    installed = structural_tags and turn_grammar is not False
    prepared = prepare(model, **fields)
    guided = prepared.requests[0].sampling.guided
    assert guided == (
        grammar.beam_turn_grammar(DECLARED, check_tool_choice("auto", DECLARED))
        if installed
        else None
    )
    choice = prepared.choices[0]
    assert choice.grammar is installed

    # Observable: a partial parameter at model EOS is a request error only under the grammar.
    pieces = play(model, choice, BEAM_PARTIAL)
    assert choice.finished is not None
    assert choice.decoder.end is not None
    assert choice.decoder.end.kind is End.MODEL_EOS
    # The EOS text is retained (for the parser) exactly when the grammar is installed.
    assert choice.decoder.end.eos_text == ("<|return|>" if installed else None)
    if installed:
        assert choice.finished.end is End.ERROR and choice.finished.failure
        assert pieces == []
    else:
        assert choice.finished.end is End.MODEL_EOS and choice.finished.failure is None
        assert fold(pieces).calls == [] and fold(pieces).content is None


@pytest.mark.parametrize(
    "fields", [{}, {"tools": TOOLS, "tool_choice": "none"}], ids=["no-tools", "none"]
)
def test_beam_without_active_tools_has_no_grammar_and_no_visible_stop(
    beam_dir: Path, fields: dict[str, Any]
) -> None:
    model = beam(beam_dir)
    prepared = prepare(model, **fields)
    assert prepared.requests[0].sampling.guided is None
    assert prepared.requests[0].stop.visible_stop_token_ids == []
    assert prepared.choices[0].grammar is False
    # `<|call|>` does not end the choice; analysis/final still parse (beam handles reasoning).
    text = "<|channel|>analysis<|message|>r<|end|><|call|><|channel|>final<|message|>Hi"
    choice = prepared.choices[0]
    pieces = play(model, choice, text)
    assert choice.decoder.end is not None and choice.decoder.end.kind is End.MODEL_EOS
    assert fold(pieces).reasoning == "r"
    assert fold(pieces).content == "Hi"


def test_beam_under_none_returns_no_call(beam_dir: Path) -> None:
    """A call written anyway under `none` is no call: its arguments are text of
    its analysis segment (reasoning), no markup shows, and the choice stops."""
    model = beam(beam_dir)
    choice = prepare(model, tools=TOOLS, tool_choice="none").choices[0]
    pieces = play(model, choice, BEAM_PARIS + "<|call|><|channel|>final<|message|>Hi")
    msg = fold(pieces)
    assert (msg.calls, msg.reasoning, msg.content) == ([], '{"city": "Paris"}', "Hi")
    assert choice.finished is not None and choice.finished.finish_reason == "stop"


def test_beam_without_tools_returns_the_call_at_the_end(beam_dir: Path) -> None:
    """No tools and no `none` (docs/beam.md): the call is returned at the end,
    as a call to an undeclared tool."""
    model = beam(beam_dir)
    choice = prepare(model).choices[0]
    pieces = play(model, choice, BEAM_PARIS + "<|call|><|channel|>final<|message|>Hi")
    msg = fold(pieces)
    assert (msg.calls, msg.content) == ([("get_weather", {"city": "Paris"})], "Hi")


@pytest.mark.parametrize("tool_choice", ["auto", "required", NAMED])
def test_beam_call_is_a_visible_stop_when_tools_are_active(
    beam_dir: Path, tool_choice: Any
) -> None:
    model = beam(beam_dir)
    tok = model.tokenizer
    assert tok is not None
    call_id = tok.token_to_id("<|call|>")
    prepared = prepare(model, tools=TOOLS, tool_choice=tool_choice)
    assert prepared.requests[0].stop.visible_stop_token_ids == [call_id]
    assert prepared.requests[0].sampling.guided == grammar.beam_turn_grammar(
        DECLARED, check_tool_choice(tool_choice, DECLARED)
    )
    choice = prepared.choices[0]
    pieces = play(model, choice, BEAM_PARIS + "<|call|><|channel|>final<|message|>after")
    assert choice.decoder.end is not None and choice.decoder.end.kind is End.VISIBLE_STOP
    assert fold(pieces).calls == [("get_weather", {"city": "Paris"})]
    assert fold(pieces).content is None
    expected = "stop" if isinstance(tool_choice, dict) else "tool_calls"
    assert choice.finished is not None and choice.finished.finish_reason == expected


# -- skip_special_tokens defaults -------------------------------------------------------------


@pytest.mark.parametrize(
    ("parser", "default"),
    [("beam", False), ("harmony", False), ("kimi_k2", False), ("hermes", True)],
)
@pytest.mark.parametrize("with_tools", [True, False])
def test_skip_special_tokens_default_follows_the_family(
    beam_dir: Path, parser: str, default: bool, with_tools: bool
) -> None:
    model = beam(beam_dir) if parser == "beam" else chatml(parser)
    fields: dict[str, Any] = {"tools": TOOLS} if with_tools else {}
    assert prepare(model, **fields).requests[0].output.skip_special_tokens is default
    for explicit in (True, False):
        got = (
            prepare(model, skip_special_tokens=explicit, **fields)
            .requests[0]
            .output.skip_special_tokens
        )
        assert got is explicit


def test_skip_special_tokens_default_decides_what_the_parser_sees(beam_dir: Path) -> None:
    """Beam's markers are special tokens: with the default they reach the parser."""
    model = beam(beam_dir)
    pieces = play(model, prepare(model, tools=TOOLS).choices[0], BEAM_PARIS, end="length")
    assert fold(pieces).calls == [("get_weather", {"city": "Paris"})]
    skipped = prepare(model, tools=TOOLS, skip_special_tokens=True)
    pieces = play(model, skipped.choices[0], BEAM_PARIS, end="length")
    assert fold(pieces).calls == []  # the markers were dropped by the decoder
