"""vLLM's `structured_outputs` is one more spelling of rotor's decoding
constraint: each kind reaches the engine request exactly as its guided_* or
response_format twin does, the kinds with no twin (and the options) reach it
as vLLM takes them, and the constraint survives the NATS codec (so migration
sees it as it sees guided_*)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rotor.model.loader import load_model
from rotor.pipeline.errors import RequestError
from rotor.pipeline.preprocess import prepare_chat
from rotor.pipeline.served import ServedModel
from rotor.protocol.codec import decode_request, encode_request
from rotor.protocol.engine import EngineRequest
from rotor.protocol.openai import ChatCompletionRequest

from support.models import write_model_dir

HELLO = [{"role": "user", "content": "hello"}]
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.fixture
def model(tmp_path: Path) -> ServedModel:
    root = write_model_dir(
        tmp_path / "m",
        special_tokens=["<eos>"],
        chat_template=TEMPLATE,
        eos_token="<eos>",
    )
    card, tok = load_model(root)
    card.capabilities.structural_tags = True  # an engine that enforces constraints
    return ServedModel.build(card, tok)


def engine_request(model: ServedModel, **fields: Any) -> EngineRequest:
    req = ChatCompletionRequest.model_validate({"model": "m", "messages": HELLO, **fields})
    return prepare_chat(model, req, "r").requests[0]


@pytest.mark.parametrize(
    ("spellings"),
    [
        [
            {"structured_outputs": {"json": SCHEMA}},
            {"guided_json": SCHEMA},
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "s", "schema": SCHEMA},
                }
            },
        ],
        [
            {"structured_outputs": {"json_object": True}},
            {"response_format": {"type": "json_object"}},
        ],
        [{"structured_outputs": {"regex": "[a-z]+"}}, {"guided_regex": "[a-z]+"}],
        [{"structured_outputs": {"choice": ["yes", "no"]}}, {"guided_choice": ["yes", "no"]}],
    ],
)
def test_each_kind_is_its_twins_constraint(model: ServedModel, spellings: list[dict]) -> None:
    constraints = [engine_request(model, **s).sampling.guided for s in spellings]
    assert constraints[0] is not None
    assert all(c == constraints[0] for c in constraints), constraints


def test_kinds_without_a_twin_and_options_travel_as_vllm_takes_them(model: ServedModel) -> None:
    tag = '{"type": "structural_tag", "format": {"type": "const_string", "value": "x"}}'
    so = {"structural_tag": tag, "whitespace_pattern": r"[ ]?"}
    guided = engine_request(model, structured_outputs=so).sampling.guided
    assert guided == {
        "type": "client_structural_tag",
        "structural_tag": tag,
        "options": {"whitespace_pattern": r"[ ]?"},
    }
    so = {"json": SCHEMA, "disable_any_whitespace": True, "disable_additional_properties": True}
    guided = engine_request(model, structured_outputs=so).sampling.guided
    assert guided == {
        "type": "json_schema",
        "json_schema": SCHEMA,
        "options": {"disable_any_whitespace": True, "disable_additional_properties": True},
    }
    grammar = 'root ::= "a" | "b"'
    guided = engine_request(model, structured_outputs={"grammar": grammar}).sampling.guided
    assert guided == {"type": "grammar", "grammar": grammar}


def test_the_constraint_crosses_the_wire_whole(model: ServedModel) -> None:
    so = {"grammar": 'root ::= "a"', "whitespace_pattern": " *"}
    request = engine_request(model, structured_outputs=so)
    assert decode_request(encode_request(request)).sampling.guided == request.sampling.guided


def test_an_engine_that_enforces_nothing_refuses_it_naming_the_field(tmp_path: Path) -> None:
    root = write_model_dir(
        tmp_path / "m", special_tokens=["<eos>"], chat_template=TEMPLATE, eos_token="<eos>"
    )
    card, tok = load_model(root)
    fields = {"model": "m", "messages": HELLO, "structured_outputs": {"regex": "a"}}
    req = ChatCompletionRequest.model_validate(fields)
    with pytest.raises(RequestError, match="cannot enforce") as e:
        prepare_chat(ServedModel.build(card, tok), req, "r")
    # the 400 names the field this client sent, not its guided_* twin
    assert (req.error_params() or {})[e.value.param or ""] == "structured_outputs"
