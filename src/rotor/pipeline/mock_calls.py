"""A `mock` script under `tool_choice` required or named: the form it is written
in, and whether the calls it makes are ones the constraint allows.

A constrained engine writes the constraint's own form: the named tool's
arguments object, or `[{"name": ..., "parameters": {...}}, ...]` for
`required` (pipeline/parse/constrained.py reads it). A script may instead be
written in the served model's call markup, as its tool-call family writes
calls (`<tool_call>{...}</tool_call>` for hermes); that choice is then parsed
by the family. Either way a script that ends its answer must make only calls
the constraint could have produced — the named tool (exactly one call) or
declared tools, arguments valid for the tool's schema, no text besides the
calls and reasoning — or the request is a 400 naming `mock` that says why: the
mocker never replays an answer the constraint forbids. A script cut short on
purpose (`length`, `eof`, `error`) is played as written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from rotor.pipeline.errors import RequestError
from rotor.pipeline.parse.base import Content, Piece, ReasoningParser, ToolCall, ToolParser, Tools
from rotor.pipeline.parse.constrained import NamedToolParser, RequiredToolsParser
from rotor.pipeline.parse.jsonutil import loads as json_loads
from rotor.pipeline.parse.message import MessageParser
from rotor.pipeline.tool_choice import ToolChoice
from rotor.protocol.mock import MockScript

# Ends after which the answer is complete, so it must satisfy the constraint.
COMPLETE_ENDS = frozenset({"eos", "eos_hidden", "stop"})
_JSON_TYPES = frozenset({"null", "boolean", "object", "array", "number", "string", "integer"})


def markup_choices(
    script: MockScript,
    n: int,
    choice: ToolChoice,
    tools: Tools,
    plan_parser: Callable[[], ToolParser] | None,
    family: type[ToolParser] | None,
    reasoning: Callable[[], ReasoningParser | None],
) -> list[bool]:
    """Per choice: True where its script is the family's markup (parse that
    choice with the family), False where the plan's parser reads it. Raises
    RequestError("mock") for a complete script the constraint forbids."""
    if plan_parser is None or not isinstance(plan_parser(), NamedToolParser | RequiredToolsParser):
        return [False] * n  # the output is not read as a constraint's form
    where = "mock.output" if isinstance(script.outputs, str) else None
    forms = []
    for i in range(n):
        text = script.output(i)
        field = where or f"mock.output[{i}]"
        forms.append(
            _markup(text, script.end, field, choice, tools, plan_parser, family, reasoning)
        )
    return forms


def _markup(
    text: str,
    end: str,
    field: str,
    choice: ToolChoice,
    tools: Tools,
    plan_parser: Callable[[], ToolParser],
    family: type[ToolParser] | None,
    reasoning: Callable[[], ReasoningParser | None],
) -> bool:
    as_constraint = _read(text, plan_parser(), reasoning())
    fault = _fault(as_constraint, choice, tools)
    if fault is None:
        return False
    as_markup = _read(text, family(tools), reasoning()) if family is not None else []
    markup_calls = any(type(p) is ToolCall for p in as_markup)
    markup_fault = _fault(as_markup, choice, tools) if markup_calls else None
    if markup_calls and markup_fault is None:
        return True
    if end not in COMPLETE_ENDS:
        return markup_calls  # cut short on purpose: played as written
    if markup_calls:
        fault = markup_fault
    elif not any(type(p) is ToolCall for p in as_constraint):
        fault = _expected(choice, family)
    constraint = "'required'" if choice.mode == "required" else f"naming {choice.name!r}"
    raise RequestError(f"{field}: under tool_choice {constraint}, the script {fault}", "mock")


def _read(text: str, tools: ToolParser, reasoning: ReasoningParser | None) -> list[Piece]:
    """The pieces a choice's parse stage makes of the whole text."""
    parser = MessageParser(reasoning=reasoning, tools=tools)
    return parser.feed(text) + parser.finish()


def _fault(pieces: list[Piece], choice: ToolChoice, tools: Tools) -> str | None:
    """What the constraint forbids in these pieces (None: nothing)."""
    calls = [p for p in pieces if type(p) is ToolCall]
    if not calls:
        return "makes no call"
    text = "".join(p.text for p in pieces if type(p) is Content).strip()
    if text:
        return f"has text besides its call(s): {_clip(text)!r}"
    if choice.mode == "named":
        if len(calls) != 1:
            return f"makes {len(calls)} calls; a named tool_choice makes exactly one"
        if calls[0].name != choice.name:
            return f"calls {calls[0].name!r}, not {choice.name!r}"
    validators: dict[str, Draft202012Validator] = {}  # one per tool, not per call
    for call in calls:
        if call.name not in tools:
            return f"calls {call.name!r}, which is not among the tools"
        validator = validators.get(call.name)
        if validator is None:
            validator = Draft202012Validator(_checkable(tools.schemas[call.name]))
            validators[call.name] = validator
        problem = _arguments_fault(call, validator)
        if problem is not None:
            return problem
    return None


def _arguments_fault(call: ToolCall, validator: Draft202012Validator) -> str | None:
    try:
        args = json_loads(call.arguments)
    except ValueError:
        return f"gives {call.name!r} arguments that are not JSON"
    error = best_match(validator.iter_errors(args))
    if error is None:
        return None
    at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    place = f" (at arguments{at})" if at else ""
    return f"gives {call.name!r} arguments its parameters do not allow: {error.message}{place}"


def _expected(choice: ToolChoice, family: type[ToolParser] | None) -> str:
    if choice.mode == "named":
        form = f"the arguments object of {choice.name!r} ({{...}})"
        markup = "one call"
    else:
        form = 'a JSON array of calls ([{"name": ..., "parameters": {...}}])'
        markup = "calls"
    if family is not None:
        return f"makes no call: write {form}, or {markup} in the model's {family.name} markup"
    return f"makes no call: write {form}"


def _checkable(node: Any) -> Any:
    """A schema with `type` names JSON Schema does not know (`int`, `dict`: the
    loose names Qwen's tool schemas write) left unchecked."""
    if isinstance(node, list):
        return [_checkable(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _checkable(v) for k, v in node.items()}
    kind = node.get("type")
    names = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    if any(not (isinstance(k, str) and k in _JSON_TYPES) for k in names):
        del out["type"]
    return out


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
