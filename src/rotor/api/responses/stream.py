"""Internal events → Responses stream events (`ResponseStream`); the items it
opens and closes are built by `items`, as the non-streaming body's are."""

from __future__ import annotations

from typing import Any

import orjson

from rotor.api.errors import APIError
from rotor.api.responses.items import call_item, part, response, text_item, usage_of
from rotor.api.sse import HOLE, NUMBER_HOLE, named_event, template
from rotor.frontend import StartedResponse
from rotor.pipeline.events import ChoiceEvent
from rotor.pipeline.parse.base import Content, Reasoning, ToolCall

# The item kind a piece's text goes to.
_ITEM_KINDS: dict[type, str] = {Content: "message", Reasoning: "reasoning"}


class ResponseStream:
    """Shapes one choice's events into Responses stream events, numbering
    them. Pure: no I/O. The final response is built from the items it closed
    (`final`, once its last event is made; `cancelled()` when the stream
    stopped before its end)."""

    def __init__(self, head: dict[str, Any], resp: StartedResponse, rid: str) -> None:
        self._rid = rid
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the reasoning or message item in progress
        self._delta_head: dict[str, Any] = {}  # its delta events, but for number and text
        self._text: list[str] = []
        # the open item's delta event's bytes around its number and its text
        self._template: tuple[bytes, ...] | None = None
        self._usage = resp.usage
        self.finish_reason: str | None = None
        self._head = head
        # the response its last event carries (completed, incomplete or failed)
        self.final: dict[str, Any] | None = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def _response(self, status: str, **fields: Any) -> dict[str, Any]:
        return response(self._head, status, list(self._output), **fields)

    def start(self) -> list[dict[str, Any]]:
        snapshot = self._response("in_progress")
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

    def frames(self, event: ChoiceEvent) -> bytes | None:
        """A lone text piece for the item already open, with no finish
        (nearly every token): its delta event from the item's template."""
        pieces = event.pieces
        if len(pieces) != 1 or event.finished is not None:
            return None
        piece = pieces[0]
        if isinstance(piece, ToolCall):
            return None
        kind = _ITEM_KINDS.get(type(piece))
        item = self._open
        if kind is None or item is None or item["type"] != kind:
            return None
        parts = self._template
        if parts is None:
            framed = named_event(self._delta_event(kind, HOLE, NUMBER_HOLE))
            parts = self._template = template(framed, NUMBER_HOLE, HOLE)
            if parts is None:
                return None
        text = piece.text
        self._text.append(text)
        seq = self._seq
        self._seq = seq + 1
        return parts[0] + str(seq).encode() + parts[1] + orjson.dumps(text) + parts[2]

    def finish(self) -> list[dict[str, Any]]:
        """The closing events: `response.completed`, or `response.incomplete` on length."""
        incomplete = self.finish_reason == "length"
        out = self._close("incomplete" if incomplete else "completed")
        usage = usage_of(self._usage)
        if incomplete:
            body = self._response(
                "incomplete", usage=usage, incomplete={"reason": "max_output_tokens"}
            )
            self.final = body
            return out + [self._event("response.incomplete", response=body)]
        body = self._response("completed", usage=usage)
        self.final = body
        return out + [self._event("response.completed", response=body)]

    def fail(self, error: APIError) -> list[dict[str, Any]]:
        """An engine or strict parse failure after the stream began."""
        message = error.message
        out = self._close("incomplete")
        failure = {"code": "server_error", "message": message}
        body = self._response("failed", usage=usage_of(self._usage), error=failure)
        self.final = body
        return out + [
            self._event("error", code="server_error", message=message, param=None),
            self._event("response.failed", response=body),
        ]

    def cancelled(self) -> dict[str, Any]:
        """The response as far as it got, `cancelled`: the stream stopped
        before its end (the client left). Its open item ends incomplete."""
        self._close("incomplete")
        return self._response("cancelled", usage=usage_of(self._usage))

    # -- items --------------------------------------------------------------------------------

    def _delta(self, kind: str, text: str) -> list[dict[str, Any]]:
        item = self._open
        out: list[dict[str, Any]] = []
        if item is None or item["type"] != kind:
            out += self._close("completed")
            out += self._begin(kind)
        self._text.append(text)
        out.append(self._delta_event(kind, text, self._seq))
        self._seq += 1
        return out

    def _delta_event(self, kind: str, text: str, seq: int | str) -> dict[str, Any]:
        """The open item's delta event: one dict from its head (`seq` a hole, for its template)."""
        event = self._delta_head.copy()
        event["sequence_number"] = seq
        event["delta"] = text
        if kind == "message":
            event["logprobs"] = []
        return event

    def _begin(self, kind: str) -> list[dict[str, Any]]:
        index = len(self._output)
        item = self._open = text_item(kind, self._rid, index, "in_progress", None)
        self._text = []
        self._template = None
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
                part=part(kind, ""),
            ),
        ]

    def _close(self, status: str) -> list[dict[str, Any]]:
        item = self._open
        if item is None:
            return []
        self._open = None
        kind = "message" if item["type"] == "message" else "reasoning"
        text = "".join(self._text)
        index = len(self._output)
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        done_item = text_item(kind, self._rid, index, status, text)
        final_part = done_item["content"][0]
        if kind == "message":
            done = self._event("response.output_text.done", **where, text=text, logprobs=[])
        else:
            done = self._event("response.reasoning_text.done", **where, text=text)
        events = [
            done,
            self._event("response.content_part.done", **where, part=final_part),
            self._event("response.output_item.done", output_index=index, item=done_item),
        ]
        self._output.append(done_item)
        return events

    def _call(self, call: ToolCall) -> list[dict[str, Any]]:
        out = self._close("completed")
        index = len(self._output)
        rid = self._rid
        item = call_item(call, rid, index, "", "in_progress")
        where = {"item_id": item["id"], "output_index": index}
        done = call_item(call, rid, index, call.arguments, "completed")
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
