"""`POST /v1/messages` and `/v1/messages/count_tokens` (Anthropic Messages) on
the chat pipeline.

A request becomes the one internal `ChatCompletionRequest` and runs through
`Frontend.chat`; `MessageStream` shapes its chat chunks into Anthropic's
stream events. Streaming sends those events (with pings while the model is
quiet); non-streaming folds the same events (`fold_message`), so the two
cannot disagree. Stops, tool calls and reasoning are the pipeline's.

Tool-use ids: the pipeline's `call_<24>` ids leave as `toolu_<24>` (the same
24 characters); ids the client sends back are used unchanged, so a tool_use
and its tool_result still pair up.

Errors on these routes (and on any /v1/ request carrying `anthropic-version`)
leave in Anthropic's envelope, whoever raised them: see `AnthropicErrors`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncGenerator
from datetime import datetime, timezone
from typing import Any

import orjson
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from rotor.api.errors import APIError, error_response
from rotor.api.metrics import Metrics
from rotor.api.route import (
    ClientGone,
    chat_request,
    client_gone,
    collect,
    disconnect_counter,
    observed,
    read_request,
    request_id,
    shaped_events,
    sse_body,
    start_chat,
)
from rotor.api.sse import SSEResponse
from rotor.frontend import Frontend, ModelNotFound
from rotor.frontend import Response as ChatResponse
from rotor.pipeline.preprocess import LONG_PROMPT_CHARS, RequestError, prepare_chat
from rotor.protocol.anthropic import (
    CountTokensRequest,
    InputMessage,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from rotor.protocol.openai import ChatCompletionRequest

# Seconds of silence after which a streaming response sends a `ping`.
PING_INTERVAL_S = float(os.environ.get("ROTOR_ANTHROPIC_PING_S", "10"))

PING: dict[str, Any] = {"type": "ping"}

# -- request → chat ---------------------------------------------------------------------------


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
            mock=req.mock.model_dump() if req.mock else None,
        )
    return chat_request(fields)


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
    pending: list[str] = []
    for j, block in enumerate(content):
        if isinstance(block, TextBlock):
            pending.append(block.text)
        elif isinstance(block, ToolResultBlock):
            if pending:
                out.append({"role": "user", "content": "\n".join(pending)})
                pending = []
            result = block.content
            if not isinstance(result, str):  # text blocks (an image never validates)
                result = "\n".join(b.text for b in result if isinstance(b, TextBlock))
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": result})
        else:
            raise APIError(
                400, f"messages.{i}.content.{j}: {block.type} blocks belong in assistant messages"
            )
    if pending or not out:
        out.append({"role": "user", "content": "\n".join(pending)})
    return out


# -- chat chunks → Anthropic events -------------------------------------------------------------


def tool_use_id(call_id: str) -> str:
    """`call_X` → `toolu_X`; any other id (a family's own) is kept."""
    if call_id.startswith("call_"):
        return "toolu_" + call_id[5:]
    return call_id


class MessageStream:
    """Shapes one choice's chat chunks into Anthropic stream events: blocks in
    order, each started, filled and stopped. Pure: no I/O."""

    def __init__(self, resp: ChatResponse, rid: str, reasoning_field: str) -> None:
        self._head = {
            "id": f"msg_{rid}",
            "type": "message",
            "role": "assistant",
            "model": resp.model,
        }
        self._prompt_tokens = sum(p.prompt_tokens for p in resp.prepared)
        self._usage = resp.usage
        self._reasoning = reasoning_field
        self._index = -1  # the latest block's index
        self._open: str | None = None  # "text" or "thinking" while such a block is open
        self._calls = 0
        self._finish: str | None = None
        self._stop: Any = None

    def start(self) -> list[dict[str, Any]]:
        message = {
            **self._head,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self._prompt_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 0,
            },
        }
        return [{"type": "message_start", "message": message}, PING]

    def chunk(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for choice in chunk["choices"]:
            delta = choice["delta"]
            text = delta.get("content")
            if text:
                out += self._delta("text", text)
            thought = delta.get(self._reasoning)
            if thought:
                out += self._delta("thinking", thought)
            for call in delta.get("tool_calls") or ():
                out += self._tool_use(call)
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
                self._stop = choice.get("stop_reason")
        return out

    def finish(self) -> list[dict[str, Any]]:
        stop_reason, stop_sequence = self._stop_reason()
        u = self._usage
        cached = u.cached_tokens or 0
        usage = {
            "input_tokens": u.prompt_tokens - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": u.completion_tokens,
        }
        return self._close() + [
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                "usage": usage,
            },
            {"type": "message_stop"},
        ]

    def fail(self, message: str) -> list[dict[str, Any]]:
        return [{"type": "error", "error": {"type": "api_error", "message": message}}]

    def _stop_reason(self) -> tuple[str, str | None]:
        if self._finish == "length":
            return "max_tokens", None
        if isinstance(self._stop, str):
            return "stop_sequence", self._stop
        if self._finish == "tool_calls" or self._calls:  # a named tool ends in "stop" in chat
            return "tool_use", None
        return "end_turn", None

    def _delta(self, kind: str, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._open != kind:
            out += self._close()
            self._index += 1
            self._open = kind
            block = (
                {"type": "text", "text": ""}
                if kind == "text"
                else {"type": "thinking", "thinking": "", "signature": ""}
            )
            out.append(
                {"type": "content_block_start", "index": self._index, "content_block": block}
            )
        delta = {"type": f"{kind}_delta", kind: text}
        out.append({"type": "content_block_delta", "index": self._index, "delta": delta})
        return out

    def _close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": self._index}]

    def _tool_use(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        out = self._close()
        self._index += 1
        self._calls += 1
        fn = call["function"]
        block = {"type": "tool_use", "id": tool_use_id(call["id"]), "name": fn["name"], "input": {}}
        i = self._index
        return out + [
            {"type": "content_block_start", "index": i, "content_block": block},
            {
                "type": "content_block_delta",
                "index": i,
                "delta": {"type": "input_json_delta", "partial_json": fn["arguments"]},
            },
            {"type": "content_block_stop", "index": i},
        ]


class MessageFailed(Exception):
    """The stream carried an `error` event: the non-streaming response is a 500."""


def fold_message(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The non-streaming message: the events applied in order, as a client
    accumulates them."""
    message: dict[str, Any] = {}
    content: list[dict[str, Any]] = []
    partial: dict[int, list[str]] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = {**event["message"], "usage": dict(event["message"]["usage"])}
            message["content"] = content
        elif kind == "content_block_start":
            content.append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            i, delta = event["index"], event["delta"]
            if delta["type"] == "text_delta":
                content[i]["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                content[i]["thinking"] += delta["thinking"]
            elif delta["type"] == "input_json_delta":
                partial.setdefault(i, []).append(delta["partial_json"])
        elif kind == "content_block_stop":
            pieces = partial.pop(event["index"], None)
            if pieces is not None:
                text = "".join(pieces)
                content[event["index"]]["input"] = orjson.loads(text) if text else {}
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"].update(event["usage"])
        elif kind == "error":
            raise MessageFailed(event["error"]["message"])
    return message


async def with_pings(
    events: AsyncGenerator[dict[str, Any], None], interval: float
) -> AsyncGenerator[dict[str, Any], None]:
    """`events`, plus a `ping` whenever `interval` seconds pass with none.

    One pump task per stream reads `events`, so the per-event path stays a
    queue hand-off; closing this generator cancels the pump, which closes the
    pipeline (and the engine's work) at once."""
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)
    end = object()
    quiet = True  # nothing arrived since the last tick

    async def pump() -> None:
        nonlocal quiet
        try:
            async for event in events:
                quiet = False
                await queue.put(event)
        except Exception as e:  # handed to the reader, raised there
            await queue.put(e)
            return
        await queue.put(end)

    async def tick() -> None:
        nonlocal quiet
        while True:
            await asyncio.sleep(interval)
            if quiet and queue.empty():
                queue.put_nowait(PING)
            quiet = True

    tasks = [asyncio.create_task(pump()), asyncio.create_task(tick())]
    try:
        while True:
            item = await queue.get()
            if item is end:
                return
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await events.aclose()


# -- errors ---------------------------------------------------------------------------------------

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def _is_anthropic(scope: dict[str, Any]) -> bool:
    path: str = scope["path"]
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return True
    return path.startswith("/v1/") and any(k == b"anthropic-version" for k, _ in scope["headers"])


def _translate(status: int, body: bytes) -> bytes:
    """The OpenAI envelope rotor writes → `{"type": "error", "error": {type, message}}`."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict) or data.get("type") == "error":
        return body
    message = error.get("message") or f"HTTP {status}"
    return orjson.dumps(
        {"type": "error", "error": {"type": error_type(status), "message": message}}
    )


class AnthropicErrors:
    """ASGI: error responses on Anthropic requests leave in Anthropic's envelope,
    whoever wrote them — validation, `--api-key`, routing, the pipeline. Only
    responses with status >= 400 are held and rewritten; streams pass through."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not _is_anthropic(scope):
            await self.app(scope, receive, send)
            return
        held: dict[str, Any] | None = None
        body: list[bytes] = []

        async def send_enveloped(message: dict[str, Any]) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] >= 400:
                held = message
                return
            if held is None or message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            payload = _translate(held["status"], b"".join(body))
            headers = [(k, v) for k, v in held.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(payload)).encode()))
            await send({**held, "headers": headers})
            await send({"type": "http.response.body", "body": payload})

        await self.app(scope, receive, send_enveloped)


# -- models -----------------------------------------------------------------------------------------


def anthropic_model(frontend: Frontend) -> dict[str, Any]:
    """The served model as Anthropic's `/v1/models/{id}` describes one."""
    card = frontend.model.card
    created = datetime.fromtimestamp(card.created, tz=timezone.utc)
    return {
        "type": "model",
        "id": card.name,
        "display_name": card.name,
        "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "max_input_tokens": card.context_length,
    }


def anthropic_models(frontend: Frontend) -> dict[str, Any]:
    data = [anthropic_model(frontend)]
    return {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}


# -- routes -----------------------------------------------------------------------------------------


def register_anthropic(app: FastAPI, frontend: Frontend, metrics: Metrics) -> None:
    """Adds the Anthropic routes and their error envelope. Call it after any
    middleware whose errors should be enveloped too (`--api-key`)."""
    app.add_middleware(AnthropicErrors)

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        req = await read_request(request, MessagesRequest, request.app.state.body_limit)
        rid = request_id(request)
        chat = to_chat(req)
        t0 = time.perf_counter()
        resp = await start_chat(frontend, chat, rid, metrics, "messages")
        shaper = MessageStream(resp, rid, frontend.reasoning_field)
        events = shaped_events(shaper, observed(resp, metrics, "messages", req.stream, t0))
        headers = {"x-request-id": rid}
        if req.stream:
            body = sse_body(with_pings(events, PING_INTERVAL_S))
            return SSEResponse(body, headers, disconnect_counter(metrics, resp.model))
        try:
            gone = disconnect_counter(metrics, resp.model)
            message = fold_message(await collect(request, events, gone))
        except ClientGone:
            return client_gone()
        except MessageFailed as e:
            return error_response(500, str(e), headers=headers)
        return Response(orjson.dumps(message), media_type="application/json", headers=headers)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> Response:
        req = await read_request(request, CountTokensRequest, request.app.state.body_limit)
        rid = request_id(request)
        chat = to_chat(req)
        try:
            served = frontend.resolve(chat.model)
        except ModelNotFound as e:
            raise APIError(404, str(e), "model") from None
        long_prompt = (
            sum(len(str(m.get("content") or "")) for m in chat.messages) > LONG_PROMPT_CHARS
        )
        try:
            if long_prompt:
                prepared = await asyncio.to_thread(prepare_chat, served, chat, rid)
            else:
                prepared = prepare_chat(served, chat, rid)
        except RequestError as e:
            raise APIError(e.status, str(e), e.param) from None
        return JSONResponse({"input_tokens": prepared.prompt_tokens}, headers={"x-request-id": rid})
