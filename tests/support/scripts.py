"""Scripted model output for the built-in mocker model (ChatML, hermes tool calls)."""

from __future__ import annotations

import json
from typing import Any


def hermes(name: str, arguments: dict[str, Any], newlines: bool = False) -> str:
    """One hermes tool call as the model writes it (`newlines`: Qwen's layout)."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>" if newlines else f"<tool_call>{body}</tool_call>"
