"""A chained turn's conversation (`previous_response_id`): the stored items
the request continues, and its own input as the items a record keeps.

As OpenAI renders a chain, the new input follows the previous response's
whole conversation (its input, every earlier turn's included, then its
output: messages, reasoning and function calls), and the whole is then
converted to chat as any input is (`convert.to_chat`).
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from rotor.api.responses.record import Record
from rotor.protocol.responses import InputItem, MessageItem, ResponsesRequest

# An item kind's id prefix, OpenAI's (`msg_...`, `fc_...`).
_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
}

_ITEMS: TypeAdapter[list[InputItem]] = TypeAdapter(list[InputItem])


def history(previous: Record | None) -> list[dict[str, Any]]:
    """The items a request continues: the previous response's conversation (none without one)."""
    return previous.conversation() if previous is not None else []


def as_input(items: list[dict[str, Any]]) -> list[InputItem]:
    """Stored items as the input items they were (every one was valid input
    or rotor's own output, which is valid input)."""
    return _ITEMS.validate_python(items)


def request_items(req: ResponsesRequest, rid: str) -> list[dict[str, Any]]:
    """The request's input as stored items, as OpenAI lists them: a string
    is one user message; each item has an id (its own, or one made of the
    request's id) and a status, and a message's text is a list of parts."""
    given = (
        [MessageItem(role="user", content=req.input)] if isinstance(req.input, str) else req.input
    )
    out: list[dict[str, Any]] = []
    for i, item in enumerate(given):
        stored = item.model_dump(by_alias=True, exclude_none=True)
        kind = stored.setdefault("type", "message")
        if not stored.get("id"):
            stored["id"] = f"{_PREFIXES[kind]}_{rid}_in{i}"
        stored.setdefault("status", "completed")
        content = stored.get("content")
        if kind == "message" and isinstance(content, str):
            part = "output_text" if stored["role"] == "assistant" else "input_text"
            stored["content"] = [{"type": part, "text": content}]
        out.append(stored)
    return out
