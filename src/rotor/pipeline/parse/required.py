"""`tool_choice: "required"` under its guided-JSON constraint: the engine was made
to write `[{"name": ..., "parameters": {...}}, ...]`, whatever the family's own
markup would be, so that array is what gets parsed."""

from __future__ import annotations

from rotor.pipeline.parse.base import Content, Piece, ToolParser, Tools
from rotor.pipeline.parse.jsonutil import calls_from_json


class RequiredToolsParser(ToolParser):
    """Buffers the output; at the end it is the calls of the array, or (a model
    that broke the constraint) content."""

    name = "required"

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._buf: list[str] = []

    def feed(self, text: str) -> list[Piece]:
        self._buf.append(text)
        return []

    def finish(self) -> list[Piece]:
        text = "".join(self._buf)
        self._buf.clear()
        calls = calls_from_json(text) if text.lstrip().startswith("[") else None
        if calls:
            return list(calls)
        return [Content(text)] if text else []
