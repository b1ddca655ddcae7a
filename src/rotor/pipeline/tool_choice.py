"""`tool_choice` checked once against the declared tools (docs/tool-calling.md):
what every later step (the parser plan, the grammars) reads instead of the
raw request field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rotor.pipeline.errors import RequestError
from rotor.pipeline.parse.base import Tools

Mode = Literal["none", "auto", "required", "named"]
# the modes a request names as a string
_NAMED_MODES: dict[str, Mode] = {"none": "none", "auto": "auto", "required": "required"}


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: Mode
    name: str | None = None  # the forced tool, for "named"
    # `tool_choice: "none"` as the request said it (not merely no tools):
    # nothing may be called, even by a family that parses without tools.
    forbids_calls: bool = False

    @property
    def active(self) -> bool:
        """Tools are offered to the model (and parsed from its output)."""
        return self.mode != "none"


def check_tool_choice(raw: str | dict[str, Any] | None, tools: Tools) -> ToolChoice:
    """The request's `tool_choice` after the consistency checks; RequestError (400)."""
    if raw is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(raw, str):
        mode = _NAMED_MODES.get(raw)
        if mode is None:
            raise RequestError(
                f"tool_choice {raw!r} must be 'none', 'auto', 'required' or a named function",
                "tool_choice",
            )
        if mode == "required" and not tools:
            raise RequestError("tool_choice 'required' needs tools", "tool_choice")
        if mode == "auto" and not tools:
            return ToolChoice("none")
        return ToolChoice(mode, forbids_calls=mode == "none")
    fn = raw.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    if raw.get("type") != "function" or not isinstance(name, str):
        raise RequestError(
            "tool_choice must be {'type': 'function', 'function': {'name': ...}}", "tool_choice"
        )
    if name not in tools:
        raise RequestError(
            f"tool_choice names {name!r}, which is not among the tools", "tool_choice"
        )
    return ToolChoice("named", name)
