"""Internal events → Responses stream events (`ResponseStream`), and the fold that
builds the non-streaming response from those same events (`fold_response`)."""

from __future__ import annotations

from typing import Any

from rotor.api.errors import APIError
from rotor.frontend import Response as ChatResponse
from rotor.pipeline.events import ChoiceEvent
from rotor.pipeline.parse.base import Content, Reasoning, ToolCall
from rotor.protocol.responses import FunctionChoice, ResponsesRequest


class ResponseStream:
    """Shapes one choice's events into Responses stream events, numbering
    them. Pure: no I/O. The final response is built from the items it closed."""

    def __init__(self, req: ResponsesRequest, resp: ChatResponse, rid: str) -> None:
        self._rid = rid
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the reasoning or message item in progress
        self._delta_head: dict[str, Any] = {}  # its delta events, but for number and text
        self._text: list[str] = []
        self._usage = resp.usage
        self.finish_reason: str | None = None
        self._head = _response_head(req, resp, rid)

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def response(
        self,
        status: str,
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        incomplete: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return {
            **self._head,
            "status": status,
            "error": error,
            "incomplete_details": incomplete,
            "output": list(self._output),
            "usage": usage,
        }

    def start(self) -> list[dict[str, Any]]:
        snapshot = self.response("in_progress")
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def event(self, event: ChoiceEvent) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for piece in event.pieces:
            if type(piece) is Content:
                out += self._delta("message", piece.text)
            elif type(piece) is Reasoning:
                out += self._delta("reasoning", piece.text)
            elif type(piece) is ToolCall:
                out += self._call(piece)
        if event.finished is not None:
            self.finish_reason = event.finished.finish_reason
        return out

    def finish(self) -> list[dict[str, Any]]:
        """The closing events: `response.completed`, or `response.incomplete` on length."""
        incomplete = self.finish_reason == "length"
        out = self._close("incomplete" if incomplete else "completed")
        usage = _usage(self._usage)
        if incomplete:
            body = self.response("incomplete", usage, incomplete={"reason": "max_output_tokens"})
            return out + [self._event("response.incomplete", response=body)]
        return out + [self._event("response.completed", response=self.response("completed", usage))]

    def fail(self, error: APIError) -> list[dict[str, Any]]:
        """An engine or strict parse failure after the stream began."""
        message = error.message
        out = self._close("incomplete")
        error = {"code": "server_error", "message": message}
        body = self.response("failed", _usage(self._usage), error=error)
        return out + [
            self._event("error", code="server_error", message=message, param=None),
            self._event("response.failed", response=body),
        ]

    # -- items --------------------------------------------------------------------------------

    def _delta(self, kind: str, text: str) -> list[dict[str, Any]]:
        item = self._open
        out: list[dict[str, Any]] = []
        if item is None or item["type"] != kind:
            out += self._close("completed")
            out += self._begin(kind)
            item = self._open
            assert item is not None
        self._text.append(text)
        # The per-token path: one dict from the open item's delta template.
        event = self._delta_head.copy()
        event["sequence_number"] = self._seq
        event["delta"] = text
        if kind == "message":
            event["logprobs"] = []
        self._seq += 1
        out.append(event)
        return out

    def _begin(self, kind: str) -> list[dict[str, Any]]:
        index = len(self._output)
        if kind == "message":
            item = {
                "id": f"msg_{self._rid}_{index}",
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
        else:
            item = {
                "id": f"rs_{self._rid}_{index}",
                "type": "reasoning",
                "summary": [],
                "content": [],
                "status": "in_progress",
            }
        self._open = item
        self._text = []
        kind_name = "output_text" if kind == "message" else "reasoning_text"
        self._delta_head = {
            "type": f"response.{kind_name}.delta",
            "sequence_number": 0,
            "item_id": item["id"],
            "output_index": index,
            "content_index": 0,
        }
        return [
            self._event("response.output_item.added", output_index=index, item=dict(item)),
            self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=_part(kind, ""),
            ),
        ]

    def _close(self, status: str) -> list[dict[str, Any]]:
        item = self._open
        if item is None:
            return []
        self._open = None
        kind = item["type"]
        text = "".join(self._text)
        where = {"item_id": item["id"], "output_index": len(self._output), "content_index": 0}
        part = _part(kind, text)
        if kind == "message":
            done = self._event("response.output_text.done", **where, text=text, logprobs=[])
        else:
            done = self._event("response.reasoning_text.done", **where, text=text)
        item = {**item, "status": status, "content": [part]}
        events = [
            done,
            self._event("response.content_part.done", **where, part=part),
            self._event("response.output_item.done", output_index=len(self._output), item=item),
        ]
        self._output.append(item)
        return events

    def _call(self, call: ToolCall) -> list[dict[str, Any]]:
        out = self._close("completed")
        index = len(self._output)
        item = {
            "id": f"fc_{self._rid}_{index}",
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": "",
            "status": "in_progress",
        }
        where = {"item_id": item["id"], "output_index": index}
        done = {**item, "arguments": call.arguments, "status": "completed"}
        out += [
            self._event("response.output_item.added", output_index=index, item=item),
            self._event("response.function_call_arguments.delta", **where, delta=call.arguments),
            self._event(
                "response.function_call_arguments.done",
                **where,
                name=call.name,
                arguments=call.arguments,
            ),
            self._event("response.output_item.done", output_index=index, item=done),
        ]
        self._output.append(done)
        return out


def _part(kind: str, text: str) -> dict[str, Any]:
    if kind == "message":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "reasoning_text", "text": text}


def _usage(usage: Any) -> dict[str, Any]:
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


def _response_head(req: ResponsesRequest, resp: ChatResponse, rid: str) -> dict[str, Any]:
    """The response object's fields that echo the request."""
    tool_choice: Any = req.tool_choice or "auto"
    if isinstance(tool_choice, FunctionChoice):
        tool_choice = tool_choice.model_dump()
    text = req.text.model_dump(by_alias=True, exclude_none=True) if req.text else None
    return {
        "id": f"resp_{rid}",
        "object": "response",
        "created_at": resp.created,
        "model": resp.model,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "parallel_tool_calls": req.parallel_tool_calls,
        "previous_response_id": None,
        "reasoning": {
            "effort": req.reasoning.effort if req.reasoning else None,
            "summary": req.reasoning.summary if req.reasoning else None,
        },
        "store": False,
        "temperature": req.temperature if req.temperature is not None else 1.0,
        "text": text or {"format": {"type": "text"}},
        "tool_choice": tool_choice,
        "tools": [t.model_dump(exclude_none=True) for t in req.tools or ()],
        "top_p": req.top_p if req.top_p is not None else 1.0,
        "truncation": "disabled",
        "user": req.user,
        "metadata": req.metadata or {},
    }


_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def fold_response(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The non-streaming response: the one the stream's terminal event carries,
    which the stream assembled from the items it sent (a failure never reaches
    a fold: it is the response's status)."""
    for event in reversed(events):
        if event["type"] in _TERMINAL:
            return event["response"]
    raise RuntimeError("the response stream ended without a terminal event")
