"""How a chat request's tools are handled (docs/tool-calling.md's tool_choice table,
docs/beam.md's turn grammar): the parser each choice gets, and the constraint — if
any — the engine decodes under."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rotor.pipeline import grammar
from rotor.pipeline.parse.base import ToolParser, Tools
from rotor.pipeline.parse.constrained import NamedToolParser, RequiredToolsParser
from rotor.pipeline.served import ServedModel
from rotor.pipeline.tool_choice import ToolChoice


@dataclass
class ToolPlan:
    make_parser: Callable[[], ToolParser] | None
    guided: dict[str, Any] | None
    grammar_installed: bool

    def parser(self) -> ToolParser | None:
        """A choice's own tool parser (None: the output is not parsed for calls)."""
        return self.make_parser() if self.make_parser is not None else None


def plan_tools(
    model: ServedModel,
    family: type[ToolParser] | None,
    tools: Tools,
    choice: ToolChoice,
    guided: dict[str, Any] | None,
    turn_grammar: bool,
) -> ToolPlan:
    """`guided` is the request's own constraint (a tool constraint replaces it)."""
    accepts_constraints = model.card.capabilities.structural_tags
    # harmony / beam frame their own output (channels, their own grammar): a
    # bare-JSON constraint would write something their parser cannot read.
    frames_output = family is not None and family.handles_reasoning
    mode = choice.mode
    make_parser: Callable[[], ToolParser] | None = None
    grammar_installed = False
    if choice.active and family is not None and family.name == "beam":
        if accepts_constraints and turn_grammar:
            guided = grammar.beam_turn_grammar(tools, choice)
            grammar_installed = True
    elif (
        accepts_constraints
        and not frames_output
        and (mode == "named" or (mode == "required" and family is not None))
    ):
        guided = grammar.tool_choice_guided(tools, choice) or guided
        # The output is what the constraint forced, not the family's markup.
        if mode == "required":
            make_parser = lambda: RequiredToolsParser(tools)  # noqa: E731
    if make_parser is None and mode == "named" and not frames_output:
        named = choice.name
        assert named is not None
        make_parser = lambda: NamedToolParser(tools, named)  # noqa: E731
    elif make_parser is None and family is not None and (frames_output or choice.active):
        # harmony/beam frame reasoning themselves: they run even without tools
        # (with none declared: a call is one to an undeclared tool). Under
        # `tool_choice: "none"` nothing may be called: a segment addressed to
        # a tool is text of its channel.
        active = tools if choice.active else Tools.forbidden() if choice.forbids_calls else Tools()
        make_parser = lambda: family(active)  # noqa: E731
    return ToolPlan(make_parser, guided, grammar_installed)
