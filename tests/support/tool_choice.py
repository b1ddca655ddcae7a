"""The tools and tool_choice requests that the in-process tests (preprocess)
and the HTTP tests both send: one table, so the two stay the same."""

from __future__ import annotations

from typing import Any

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
}
TIME = {"type": "object", "properties": {"zone": {"type": "string"}}}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}

# (id, request fields): tool_choice that does not fit the tools, a 400 naming tool_choice.
INCONSISTENT: list[tuple[str, dict[str, Any]]] = [
    (
        "named-undeclared",
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
    ),
    ("named-without-tools", {"tool_choice": NAMED}),
    ("required-without-tools", {"tool_choice": "required"}),
    ("required-with-empty-tools", {"tools": [], "tool_choice": "required"}),
    ("unknown-string", {"tools": TOOLS, "tool_choice": "always"}),
    ("named-without-name", {"tools": TOOLS, "tool_choice": {"type": "function", "function": {}}}),
    (
        "named-wrong-type",
        {"tools": TOOLS, "tool_choice": {"type": "tool", "function": {"name": "get_weather"}}},
    ),
]
