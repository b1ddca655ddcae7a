"""Decoding constraints for tool calls (`EngineRequest.sampling.guided`).

Two shapes, both built from the request's declared tools and its `tool_choice`:

- `beam_turn_grammar`: an xgrammar-style structural tag over a whole Beam turn
  (`docs/beam.md`). `structures` lists every segment tag (analysis, final, and
  one tool tag per declared tool whose body admits only that tool's parameter
  names); `triggers` are the strings that open them; `format` composes the tags
  into the turn in xgrammar's current structural-tag format (segments back to
  back, nothing between them; `required` / a named tool put a call first).
- `tool_choice_guided`: for every other family, a JSON schema that forces
  `required` (a non-empty array of calls) or one named tool's arguments.

Both take the `ToolChoice` that `pipeline/tool_choice.py` checked; the
markers are the Harmony/Beam family's own (parse/families).
"""

from __future__ import annotations

from typing import Any

from rotor.pipeline.parse.base import Tools
from rotor.pipeline.parse.families.beam import PARAM_CLOSE, PARAM_OPEN
from rotor.pipeline.parse.families.harmony import (
    CALL,
    CHANNEL,
    CONSTRAIN,
    END,
    MESSAGE,
    RECIPIENT,
    RETURN,
    START,
)
from rotor.pipeline.tool_choice import ToolChoice

ASSISTANT = f"{START}assistant"

# Each structure begins with exactly one of these.
TRIGGERS = [CHANNEL, ASSISTANT, " " + RECIPIENT]


def _any_text() -> dict[str, Any]:
    return {"type": "any_text"}


def _empty_object() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


def _tag(begin: str, content: dict[str, Any], end: str) -> dict[str, Any]:
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def _segment(begin: str, content: dict[str, Any], ends: tuple[str, ...]) -> list[dict[str, Any]]:
    """One segment's tags: bare (first segment, after the prompt's `<|start|>assistant`)
    and with the `<|start|>assistant` a later segment may repeat, for each allowed end."""
    return [_tag(prefix + begin, content, end) for prefix in ("", ASSISTANT) for end in ends]


def _value(schema: Any) -> dict[str, Any]:
    """A parameter value: raw text, or JSON when the schema names one non-string type."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, str) and kind != "string":
        return {"type": "json_schema", "json_schema": schema}
    return _any_text()


def _params(schema: dict[str, Any]) -> dict[str, Any]:
    """A call body: `<rfl:parameter name="K">…</rfl:parameter>` with K a declared property."""
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return {"type": "const_string", "value": ""}
    tags = [_tag(f'{PARAM_OPEN}{key}">', _value(sub), PARAM_CLOSE) for key, sub in props.items()]
    return {"type": "tags_with_separator", "tags": tags, "separator": "", "at_least_one": False}


def analysis_tags() -> list[dict[str, Any]]:
    return _segment(f"{CHANNEL}analysis{MESSAGE}", _any_text(), (END,))


def final_tags() -> list[dict[str, Any]]:
    return _segment(f"{CHANNEL}final{MESSAGE}", _any_text(), (RETURN, END))


def tool_tags(name: str, schema: dict[str, Any]) -> list[dict[str, Any]]:
    header = f" {RECIPIENT}{name}{CHANNEL}analysis {CONSTRAIN}xml{MESSAGE}"
    return _segment(header, _params(schema), (CALL, END))


def _repeat(tags: list[dict[str, Any]], at_most_one: bool = False) -> dict[str, Any]:
    return {
        "type": "tags_with_separator",
        "tags": tags,
        "separator": "",
        "at_least_one": False,
        "stop_after_first": at_most_one,
    }


def beam_turn_grammar(tools: Tools, choice: ToolChoice) -> dict[str, Any]:
    """The structural tag for one Beam assistant turn under `choice`."""
    forced = choice.name
    if choice.mode == "none":
        names: list[str] = []
    elif forced is not None:
        names = [forced]
    else:
        names = list(tools.schemas)
    analysis, final = analysis_tags(), final_tags()
    calls = [tag for name in names for tag in tool_tags(name, tools.schemas[name] or {})]
    if forced is not None or choice.mode == "required":
        # A call before any final text: no final-only turn.
        turn: dict[str, Any] = {
            "type": "sequence",
            "elements": [
                _repeat(analysis),
                {"type": "or", "elements": calls},
                _repeat(analysis + calls),
                _repeat(final, at_most_one=True),
            ],
        }
    else:
        turn = _repeat(analysis + calls + final)
    return {
        "type": "structural_tag",
        "structures": analysis + calls + final,
        "triggers": list(TRIGGERS),
        "format": turn,
    }


def tool_choice_guided(tools: Tools, choice: ToolChoice) -> dict[str, Any] | None:
    """The JSON-schema constraint for `required` or a named tool; None otherwise."""
    forced = choice.name
    if forced is not None:
        return {"type": "json_schema", "json_schema": tools.schemas[forced] or _empty_object()}
    if choice.mode != "required":
        return None
    items = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [name]},
                "parameters": schema or _empty_object(),
            },
            "required": ["name", "parameters"],
        }
        for name, schema in tools.schemas.items()
    ]
    return {
        "type": "json_schema",
        "json_schema": {"type": "array", "minItems": 1, "items": {"anyOf": items}},
    }
