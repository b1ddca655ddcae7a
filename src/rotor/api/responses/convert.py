"""A Responses request → the internal `ChatCompletionRequest`, so it runs
through the one chat pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rotor.api.body import internal_chat
from rotor.protocol.openai import ChatCompletionRequest
from rotor.protocol.responses import (
    FormatJSONObject,
    FormatJSONSchema,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionChoice,
    InputImage,
    InputItem,
    MessageItem,
    Part,
    ReasoningItem,
    Refusal,
    ResponsesRequest,
    UnsupportedInput,
)

# RequestError params in chat terms → the Responses field the client sent.
PARAMS = {
    "messages": "input",
    "max_tokens": "max_output_tokens",
    "response_format": "text.format",
    "guided_json": "text.format",
}


def to_chat(req: ResponsesRequest, history: Sequence[InputItem] = ()) -> ChatCompletionRequest:
    """`history`: the conversation the request continues (`previous_response_id`),
    before its own input; its instructions come first, whatever came before."""
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    items: list[Any] = list(history)
    if isinstance(req.input, str):
        items.append(MessageItem(role="user", content=req.input))
    else:
        items.extend(req.input)
    messages.extend(_messages(items, len(items) - len(history)))
    tools = None
    if req.tools:
        tools = [
            {
                "type": "function",
                "function": {
                    k: v
                    for k, v in (
                        ("name", t.name),
                        ("description", t.description),
                        ("parameters", t.parameters),
                        ("strict", t.strict),
                    )
                    if v is not None
                },
            }
            for t in req.tools
        ]
    tool_choice: Any = req.tool_choice
    if isinstance(tool_choice, FunctionChoice):
        tool_choice = {"type": "function", "function": {"name": tool_choice.name}}
    fmt = req.text.format if req.text else None
    response_format = None
    if isinstance(fmt, FormatJSONSchema):
        schema: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema_}
        if fmt.strict is not None:
            schema["strict"] = fmt.strict
        response_format = {"type": "json_schema", "json_schema": schema}
    elif isinstance(fmt, FormatJSONObject):
        response_format = {"type": "json_object"}
    return internal_chat(
        {
            "model": req.model,
            "messages": messages,
            "max_tokens": req.max_output_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "stop": req.stop,
            "stream": req.stream,
            "tools": tools,
            "tool_choice": tool_choice,
            "parallel_tool_calls": req.parallel_tool_calls,
            "response_format": response_format,
            "reasoning_effort": req.reasoning.effort if req.reasoning else None,
            "metadata": req.metadata,
            "user": req.user,
            "mock": req.mock,
        }
    )


def _messages(items: list[Any], own: int) -> list[dict[str, Any]]:
    """Input items → chat messages. Function calls join the assistant turn just
    before them; reasoning items become the next assistant turn's reasoning.
    The last `own` items are the request's `input` (the others, a stored
    conversation's): an image part names its place there."""
    first = len(items) - own

    def where(n: int, key: str) -> str:
        return f"input[{n - first}].{key}" if n >= first else f"previous_response_id: item {n}"

    out: list[dict[str, Any]] = []
    reasoning: list[str] = []

    def assistant(content: Any) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            msg["reasoning_content"] = "".join(reasoning)
            reasoning.clear()
        out.append(msg)
        return msg

    for n, item in enumerate(items):
        if isinstance(item, MessageItem):
            content = _content(item.content, where(n, "content"))
            if item.role == "assistant":
                assistant(content)
            else:
                out.append({"role": item.role, "content": content})
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and not reasoning:
                last.setdefault("tool_calls", []).append(call)
            else:
                assistant(None)["tool_calls"] = [call]
        elif isinstance(item, FunctionCallOutputItem):
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item.call_id,
                    "content": _content(item.output, where(n, "output")),
                }
            )
        elif isinstance(item, ReasoningItem):
            parts = item.content if item.content is not None else item.summary
            reasoning.append("".join(p.text for p in parts))
    return out


def _content(content: str | list[Part], where: str) -> str | list[dict[str, Any]]:
    """Parts joined into one string (every template can render a string), or
    with an image, text and image_url parts in order, each image naming its
    part (`where[k]`)."""
    if isinstance(content, str):
        return content
    if not any(isinstance(p, InputImage) for p in content):
        return "\n".join(_part_text(p) for p in content)
    return [
        {"type": "image_url", "image_url": {"url": p.image_url}, "where": f"{where}[{k}]"}
        if isinstance(p, InputImage)
        else {"type": "text", "text": _part_text(p)}
        for k, p in enumerate(content)
    ]


def _part_text(part: Part) -> str:
    if isinstance(part, Refusal):
        return part.refusal
    if isinstance(part, (UnsupportedInput, InputImage)):  # refused, or not text: never here
        raise AssertionError(f"input {part!r} is not text")
    return part.text
