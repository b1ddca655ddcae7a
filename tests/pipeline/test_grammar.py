"""Tool-call constraints: the Beam turn grammar and the JSON-schema tool_choice forms."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rotor.pipeline.errors import RequestError
from rotor.pipeline.grammar import TRIGGERS, beam_turn_grammar, tool_choice_guided
from rotor.pipeline.parse.base import Tools
from rotor.pipeline.tool_choice import check_tool_choice

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}
SEARCH = {"type": "object", "properties": {"q": {"type": "string"}}}
TOOLS = Tools({"weather.lookup": WEATHER, "search": SEARCH, "ping": {}})
NAMED = {"type": "function", "function": {"name": "search"}}


def tool_names(grammar: dict[str, Any]) -> set[str]:
    names = set()
    for tag in grammar["structures"]:
        begin = tag["begin"]
        if " to=" in begin:
            names.add(begin.split(" to=", 1)[1].split("<|channel|>", 1)[0])
    return names


def tool_tags(grammar: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [t for t in grammar["structures"] if f" to={name}<|channel|>" in t["begin"]]


def param_names(tag: dict[str, Any]) -> set[str]:
    content = tag["content"]
    if content["type"] == "const_string":
        return set()
    assert content["type"] == "tags_with_separator"
    names = set()
    for param in content["tags"]:
        assert param["begin"].startswith('<rfl:parameter name="') and param["begin"].endswith('">')
        assert param["end"] == "</rfl:parameter>"
        names.add(param["begin"][len('<rfl:parameter name="') : -2])
    return names


def segments(grammar: dict[str, Any], channel: str) -> list[dict[str, Any]]:
    return [
        t
        for t in grammar["structures"]
        if " to=" not in t["begin"] and t["begin"].endswith(f"<|channel|>{channel}<|message|>")
    ]


def test_auto_allows_every_tool_analysis_and_final() -> None:
    grammar = beam_turn_grammar(TOOLS, check_tool_choice("auto", TOOLS))
    assert grammar["type"] == "structural_tag"
    assert tool_names(grammar) == {"weather.lookup", "search", "ping"}
    assert {t["end"] for t in segments(grammar, "analysis")} == {"<|end|>"}
    assert {t["end"] for t in segments(grammar, "final")} == {"<|return|>", "<|end|>"}
    # A segment may start bare (right after the prompt) or repeat <|start|>assistant.
    begins = {t["begin"] for t in segments(grammar, "analysis")}
    assert begins == {
        "<|channel|>analysis<|message|>",
        "<|start|>assistant<|channel|>analysis<|message|>",
    }
    # Segments follow one another with nothing between them, any number of each.
    turn = grammar["format"]
    assert turn["type"] == "tags_with_separator" and turn["separator"] == ""
    assert not turn["at_least_one"]
    assert turn["tags"] == grammar["structures"]
    json.dumps(grammar)  # it travels on the wire


def test_tool_tags_follow_the_beam_header_and_end() -> None:
    grammar = beam_turn_grammar(TOOLS, check_tool_choice("auto", TOOLS))
    tags = tool_tags(grammar, "weather.lookup")
    assert {t["begin"] for t in tags} == {
        " to=weather.lookup<|channel|>analysis <|constrain|>xml<|message|>",
        "<|start|>assistant to=weather.lookup<|channel|>analysis <|constrain|>xml<|message|>",
    }
    assert {t["end"] for t in tags} == {"<|call|>", "<|end|>"}


def test_parameters_restricted_to_the_tools_properties() -> None:
    grammar = beam_turn_grammar(TOOLS, check_tool_choice("auto", TOOLS))
    for tag in tool_tags(grammar, "weather.lookup"):
        assert param_names(tag) == {"city", "days"}
        values = {p["begin"]: p["content"] for p in tag["content"]["tags"]}
        # A string is raw text (the end tag excluded); an integer is JSON of its schema.
        assert values['<rfl:parameter name="city">'] == {"type": "any_text"}
        assert values['<rfl:parameter name="days">'] == {
            "type": "json_schema",
            "json_schema": {"type": "integer"},
        }
    for tag in tool_tags(grammar, "search"):
        assert param_names(tag) == {"q"}
    for tag in tool_tags(grammar, "ping"):
        assert param_names(tag) == set()


def test_every_structure_opens_with_exactly_one_trigger() -> None:
    grammar = beam_turn_grammar(TOOLS, check_tool_choice("auto", TOOLS))
    assert grammar["triggers"] == TRIGGERS
    for tag in grammar["structures"]:
        assert sum(tag["begin"].startswith(t) for t in grammar["triggers"]) == 1, tag["begin"]


def test_required_puts_a_call_before_any_final() -> None:
    grammar = beam_turn_grammar(TOOLS, check_tool_choice("required", TOOLS))
    assert tool_names(grammar) == {"weather.lookup", "search", "ping"}
    turn = grammar["format"]
    assert turn["type"] == "sequence"
    lead, first_call, rest, final = turn["elements"]
    assert all(
        "analysis<|message|>" in t["begin"] for t in lead["tags"]
    )  # reasoning may come first
    assert first_call["type"] == "or"
    assert first_call["elements"] and all(" to=" in t["begin"] for t in first_call["elements"])
    assert {t["begin"] for t in first_call["elements"]} == {
        t["begin"] for t in grammar["structures"] if " to=" in t["begin"]
    }
    assert not any("final" in t["begin"] for t in lead["tags"] + rest["tags"])
    assert all("<|channel|>final" in t["begin"] for t in final["tags"])
    assert final["stop_after_first"]  # at most one final, and it ends the turn


def test_named_narrows_to_that_tool() -> None:
    grammar = beam_turn_grammar(TOOLS, check_tool_choice(NAMED, TOOLS))
    assert tool_names(grammar) == {"search"}
    first_call = grammar["format"]["elements"][1]
    assert {t["begin"].split(" to=")[1].split("<|")[0] for t in first_call["elements"]} == {
        "search"
    }


def test_none_allows_no_call() -> None:
    grammar = beam_turn_grammar(TOOLS, check_tool_choice("none", TOOLS))
    assert tool_names(grammar) == set()
    assert segments(grammar, "final")


@pytest.mark.parametrize(
    "choice",
    [{"type": "function", "function": {"name": "nope"}}, "sometimes"],
)
def test_impossible_choice_is_rejected(choice: Any) -> None:
    with pytest.raises(ValueError):
        beam_turn_grammar(TOOLS, check_tool_choice(choice, TOOLS))
    with pytest.raises(ValueError):
        tool_choice_guided(TOOLS, check_tool_choice(choice, TOOLS))


def test_required_without_tools_is_rejected() -> None:
    with pytest.raises(RequestError, match="needs tools"):
        check_tool_choice("required", Tools())


@pytest.mark.parametrize("choice", ["auto", "none", None])
def test_guided_is_none_unless_forced(choice: Any) -> None:
    assert tool_choice_guided(TOOLS, check_tool_choice(choice, TOOLS)) is None


def test_guided_required_is_a_non_empty_array_of_declared_calls() -> None:
    guided = tool_choice_guided(TOOLS, check_tool_choice("required", TOOLS))
    assert guided is not None and guided["type"] == "json_schema"
    schema = guided["json_schema"]
    assert schema["type"] == "array" and schema["minItems"] == 1
    options = schema["items"]["anyOf"]
    by_name = {o["properties"]["name"]["enum"][0]: o for o in options}
    assert set(by_name) == {"weather.lookup", "search", "ping"}
    for option in options:
        assert option["required"] == ["name", "parameters"]
        assert len(option["properties"]["name"]["enum"]) == 1
    assert by_name["weather.lookup"]["properties"]["parameters"] == WEATHER
    assert by_name["ping"]["properties"]["parameters"]["type"] == "object"
    json.dumps(guided)


def test_guided_named_is_that_tools_parameters() -> None:
    assert tool_choice_guided(TOOLS, check_tool_choice(NAMED, TOOLS)) == {
        "type": "json_schema",
        "json_schema": SEARCH,
    }
    ping = tool_choice_guided(
        TOOLS, check_tool_choice({"type": "function", "function": {"name": "ping"}}, TOOLS)
    )
    assert ping is not None and ping["json_schema"]["type"] == "object"
