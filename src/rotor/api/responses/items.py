"""The pieces of a Responses `response` object, built the same way for the
stream (`ResponseStream`) and the non-streaming body (`response_body`): the
head that echoes the request, the output items, the usage."""

from __future__ import annotations

from typing import Any

from rotor.pipeline.collected import Collected
from rotor.pipeline.events import Usage
from rotor.pipeline.parse.base import Content, Reasoning, ToolCall
from rotor.protocol.responses import FunctionChoice, ResponsesRequest


def response_id(rid: str) -> str:
    """The id of the response to request `rid` (its items' ids are made of `rid` too)."""
    return f"resp_{rid}"


def response_head(req: ResponsesRequest, model: str, created: int, rid: str) -> dict[str, Any]:
    """The response object's fields that echo the request: `model` as the
    request named it, made at `created` (Unix seconds)."""
    tool_choice: Any = req.tool_choice or "auto"
    if isinstance(tool_choice, FunctionChoice):
        tool_choice = tool_choice.model_dump()
    text = req.text.model_dump(by_alias=True, exclude_none=True) if req.text else None
    return {
        "id": response_id(rid),
        "object": "response",
        "created_at": created,
        "model": model,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "parallel_tool_calls": req.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "reasoning": {
            "effort": req.reasoning.effort if req.reasoning else None,
            "summary": req.reasoning.summary if req.reasoning else None,
        },
        "store": req.store,
        "background": req.background,
        "temperature": req.temperature if req.temperature is not None else 1.0,
        "text": text or {"format": {"type": "text"}},
        "tool_choice": tool_choice,
        "tools": [t.model_dump(exclude_none=True) for t in req.tools or ()],
        "top_p": req.top_p if req.top_p is not None else 1.0,
        "truncation": "disabled",
        "user": req.user,
        "metadata": req.metadata or {},
    }


def response(
    head: dict[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        **head,
        "status": status,
        "error": error,
        "incomplete_details": incomplete,
        "output": output,
        "usage": usage,
    }


def text_item(kind: str, rid: str, index: int, status: str, text: str | None) -> dict[str, Any]:
    """A message (`kind` "message") or reasoning item; `text` None: still
    open, with no content yet."""
    content = [] if text is None else [part(kind, text)]
    if kind == "message":
        return {
            "id": f"msg_{rid}_{index}",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }
    return {
        "id": f"rs_{rid}_{index}",
        "type": "reasoning",
        "summary": [],
        "content": content,
        "status": status,
    }


def call_item(call: ToolCall, rid: str, index: int, arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": f"fc_{rid}_{index}",
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
        "status": status,
    }


def part(kind: str, text: str) -> dict[str, Any]:
    if kind == "message":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "reasoning_text", "text": text}


def usage_of(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens or 0,
            "cache_write_tokens": 0,
        },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def response_body(
    head: dict[str, Any], rid: str, choice: Collected, usage: Usage
) -> dict[str, Any]:
    """The non-streaming response: the choice's items in the order they came;
    the last text item is incomplete when the output ran out of tokens."""
    pieces = choice.pieces()
    incomplete = choice.finish_reason == "length"
    output: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        if type(piece) is ToolCall:
            output.append(call_item(piece, rid, i, piece.arguments, "completed"))
            continue
        assert isinstance(piece, (Content, Reasoning))
        kind = "message" if type(piece) is Content else "reasoning"
        last = i == len(pieces) - 1
        status = "incomplete" if incomplete and last else "completed"
        output.append(text_item(kind, rid, i, status, piece.text))
    if incomplete:
        return response(
            head, "incomplete", output, usage_of(usage), incomplete={"reason": "max_output_tokens"}
        )
    return response(head, "completed", output, usage_of(usage))
