"""A `mock` script of many calls under `tool_choice` required: each tool's
arguments schema is compiled once for the whole script, not once per call
(a 1 MB script of small calls made 30,000 validators), and the first call
the schema forbids is still the one named."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from jsonschema import Draft202012Validator

from rotor.model.builtin import builtin_test_model
from rotor.pipeline import mock_calls
from rotor.pipeline.errors import RequestError
from rotor.pipeline.preprocess import prepare_chat
from rotor.pipeline.served import ServedModel
from rotor.protocol.openai import ChatCompletionRequest

from support.tool_choice import MESSAGES, TOOLS


def prepare(calls: list[dict[str, Any]]) -> None:
    card, tok = builtin_test_model()
    model = ServedModel.build(card, tok, tool_parser_name="hermes")
    req = ChatCompletionRequest.model_validate(
        {
            "messages": MESSAGES,
            "tools": TOOLS,
            "tool_choice": "required",
            "mock": {"output": orjson.dumps(calls).decode()},
        }
    )
    prepare_chat(model, req, "req-1")


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The schemas mock_calls compiles a validator for, in order."""
    schemas: list[dict[str, Any]] = []

    def counting(schema: dict[str, Any]) -> Draft202012Validator:
        schemas.append(schema)
        return Draft202012Validator(schema)

    monkeypatch.setattr(mock_calls, "Draft202012Validator", counting)
    return schemas


def test_each_tools_schema_is_compiled_once_for_a_script_of_many_calls(
    compiled: list[dict[str, Any]],
) -> None:
    weather = {"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}
    time = {"name": "get_time", "parameters": {"zone": "CET"}}
    prepare([weather, time] * 50)
    assert [set(schema["properties"]) for schema in compiled] == [{"city", "days"}, {"zone"}]


def test_the_first_call_its_schema_forbids_is_named(compiled: list[dict[str, Any]]) -> None:
    good = {"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}
    bad = {"name": "get_weather", "parameters": {"city": "Paris", "days": "two"}}
    with pytest.raises(RequestError) as e:
        prepare([good] * 20 + [bad] + [good] * 20)
    assert e.value.param == "mock"
    assert "'get_weather' arguments its parameters do not allow" in str(e.value)
    assert "(at arguments.days)" in str(e.value)
    assert len(compiled) == 1
