"""An Anthropic Messages (or count_tokens) request → the internal
`ChatCompletionRequest`, so both run through the one chat pipeline.

Tool-use ids the client sends back are used unchanged, so a tool_use and its
tool_result still pair up.
"""

from __future__ import annotations

from typing import Any

import orjson

from rotor.api.body import internal_chat
from rotor.api.errors import APIError
from rotor.protocol.anthropic import (
    CountTokensRequest,
    ImageBlock,
    InputMessage,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from rotor.protocol.openai import ChatCompletionRequest


def to_chat(req: CountTokensRequest) -> ChatCompletionRequest:
    """The internal chat request. A `MessagesRequest` brings its sampling too;
    a bare `CountTokensRequest` only what makes the prompt."""
    messages: list[dict[str, Any]] = []
    if req.system:
        system = req.system if isinstance(req.system, str) else _join(req.system)
        messages.append({"role": "system", "content": system})
    for i, message in enumerate(req.messages):
        messages.extend(_messages(i, message))
    fields: dict[str, Any] = {"model": req.model, "messages": messages}
    last = messages[-1]
    if req.messages[-1].role == "assistant" and last.get("content") and "tool_calls" not in last:
        # Anthropic's prefill: the reply continues the final assistant text.
        fields.update(continue_final_message=True, add_generation_prompt=False)
    if req.tools:
        fields["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    **({"description": t.description} if t.description is not None else {}),
                    "parameters": t.input_schema,
                },
            }
            for t in req.tools
        ]
    choice = req.tool_choice
    if choice is not None:
        if choice.type == "tool":
            fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        else:
            fields["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
        if choice.disable_parallel_tool_use:
            fields["parallel_tool_calls"] = False
    if req.thinking is not None:
        fields["chat_template_kwargs"] = {"enable_thinking": req.thinking.type != "disabled"}
    if isinstance(req, MessagesRequest):
        fields.update(
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            stop=req.stop_sequences,
            stream=req.stream,
            metadata=req.metadata.model_dump(exclude_none=True) if req.metadata else None,
            mock=req.mock,
        )
    return internal_chat(fields)


def _join(blocks: list[TextBlock]) -> str:
    return "\n".join(b.text for b in blocks)


def _messages(i: int, message: InputMessage) -> list[dict[str, Any]]:
    """One Anthropic message → chat messages: tool_use blocks become the
    assistant's tool_calls (arguments as JSON strings), thinking its reasoning,
    each tool_result a `tool` message, in the order the blocks came."""
    role, content = message.role, message.content
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if role == "assistant":
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(content):
            if isinstance(block, TextBlock):
                texts.append(block.text)
            elif isinstance(block, ThinkingBlock):
                thinking.append(block.thinking)
            elif isinstance(block, ToolUseBlock):
                calls.append(
                    {
                        "id": block.id,
                        "type": "function",
                        "function": {
                            "name": block.name,
                            "arguments": orjson.dumps(block.input).decode(),
                        },
                    }
                )
            elif not isinstance(block, RedactedThinkingBlock):
                raise APIError(
                    400, f"messages.{i}.content.{j}: {block.type} blocks belong in user messages"
                )
        msg: dict[str, Any] = {
            "role": "assistant",
            "content": "\n".join(texts) if texts else (None if calls else ""),
        }
        if thinking:
            msg["reasoning_content"] = "".join(thinking)
        if calls:
            msg["tool_calls"] = calls
        return [msg]
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # the user's text and image parts since the last result
    for j, block in enumerate(content):
        if isinstance(block, TextBlock):
            pending.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            pending.append(_image(block, f"messages[{i}].content[{j}]"))
        elif isinstance(block, ToolResultBlock):
            if pending:
                out.append({"role": "user", "content": _user_content(pending)})
                pending = []
            result: Any = block.content
            if not isinstance(result, str):
                parts = [
                    _image(b, f"messages[{i}].content[{j}].content[{k}]")
                    if isinstance(b, ImageBlock)
                    else {"type": "text", "text": b.text}
                    for k, b in enumerate(result)
                ]
                result = _user_content(parts)
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": result})
        else:
            raise APIError(
                400, f"messages.{i}.content.{j}: {block.type} blocks belong in assistant messages"
            )
    if pending or not out:
        out.append({"role": "user", "content": _user_content(pending)})
    return out


def _image(block: ImageBlock, where: str) -> dict[str, Any]:
    """The chat image_url part, naming the block where the client put it."""
    return {"type": "image_url", "image_url": {"url": block.url()}, "where": where}


def _user_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text alone joined by newlines, as before; with an image, the parts in order."""
    if any(p["type"] == "image_url" for p in parts):
        return parts
    return "\n".join(p["text"] for p in parts)
