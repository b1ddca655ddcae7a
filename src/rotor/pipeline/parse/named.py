"""Named `tool_choice`: the whole output is the arguments object of that one tool."""

from __future__ import annotations

import json

from rotor.pipeline.parse.base import Content, Piece, ToolCall, ToolParser, Tools
from rotor.pipeline.parse.jsonutil import dumps_args


class NamedToolParser(ToolParser):
    """Buffers the output; at the end it is one call to `tool` when it is a JSON
    object, else (a model that ignored the constraint) it is content."""

    name = "named"

    def __init__(self, tools: Tools, tool: str) -> None:
        super().__init__(tools)
        self.tool = tool
        self._buf: list[str] = []

    def feed(self, text: str) -> list[Piece]:
        self._buf.append(text)
        return []

    def finish(self) -> list[Piece]:
        text = "".join(self._buf)
        self._buf.clear()
        try:
            args = json.loads(text)
        except ValueError:
            args = None
        if isinstance(args, dict):
            return [ToolCall(self.tool, dumps_args(args))]
        return [Content(text)] if text else []
