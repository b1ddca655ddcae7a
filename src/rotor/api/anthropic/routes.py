"""Registers the Anthropic routes (`/v1/messages`, `/v1/messages/count_tokens`)
and their error envelope on the app: HTTP in, `convert`, the pipeline,
`stream` out.
"""

from __future__ import annotations

import asyncio
import time

import orjson
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from rotor.api.anthropic.convert import to_chat
from rotor.api.anthropic.errors import AnthropicErrors
from rotor.api.anthropic.stream import (
    PING_INTERVAL_S,
    MessageFailed,
    MessageStream,
    fold_message,
    with_pings,
)
from rotor.api.errors import APIError, error_response
from rotor.api.metrics import Metrics
from rotor.api.route import (
    ClientGone,
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
from rotor.pipeline.preprocess import LONG_PROMPT_CHARS, RequestError, prepare_chat
from rotor.protocol.anthropic import CountTokensRequest, MessagesRequest


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
