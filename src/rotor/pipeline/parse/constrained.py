"""Outputs shaped by a tool_choice constraint rather than by the family's markup.

Under a named `tool_choice` the engine writes that tool's arguments object;
under `required` it writes `[{"name": ..., "parameters": {...}}, ...]`. Either
way the whole output is buffered and read at the end; a model that broke the
constraint (an engine that could not enforce it) gets its text back as content.
"""

from __future__ import annotations

from rotor.pipeline.parse.base import Content, Piece, ToolCall, ToolParser, Tools
from rotor.pipeline.parse.jsonutil import calls_from_json, dumps_args
from rotor.pipeline.parse.jsonutil import loads as json_loads


class _BufferedParser(ToolParser):
    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._buf: list[str] = []

    def feed(self, text: str) -> list[Piece]:
        self._buf.append(text)
        return []

    def finish(self) -> list[Piece]:
        text = "".join(self._buf)
        self._buf.clear()
        calls = self.read(text)
        if calls:
            return list(calls)
        return [Content(text)] if text else []

    def read(self, text: str) -> list[ToolCall] | None:
        raise NotImplementedError


class NamedToolParser(_BufferedParser):
    """The output is the arguments object of one call to `tool`."""

    name = "named"

    def __init__(self, tools: Tools, tool: str) -> None:
        super().__init__(tools)
        self.tool = tool

    def read(self, text: str) -> list[ToolCall] | None:
        try:
            args = json_loads(text)
        except ValueError:
            return None
        return [ToolCall(self.tool, dumps_args(args))] if isinstance(args, dict) else None


class RequiredToolsParser(_BufferedParser):
    """The output is the array of calls `required` forces."""

    name = "required"

    def read(self, text: str) -> list[ToolCall] | None:
        return calls_from_json(text) if text.lstrip().startswith("[") else None
