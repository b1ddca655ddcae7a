"""Registers the Anthropic routes (`/v1/messages`, `/v1/messages/count_tokens`)
on the app: HTTP in, `convert`, the pipeline, `stream` out. Their errors leave
in Anthropic's envelope (api/errors.is_anthropic)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from rotor.api.anthropic.convert import to_chat
from rotor.api.anthropic.stream import FRAMING, MessageStream, message_body
from rotor.api.body import read_request, request_id
from rotor.api.openapi import route
from rotor.api.respond import APIView, Responder
from rotor.frontend import StartedResponse
from rotor.protocol.anthropic import CountTokensRequest, MessagesRequest


def register_anthropic(app: FastAPI, responder: Responder, body_limit: int) -> None:
    frontend = responder.frontend

    def view(resp: StartedResponse, rid: str) -> APIView:
        return APIView(
            lambda: MessageStream(resp, rid), FRAMING, lambda c: message_body(resp, rid, c[0])
        )

    @app.post("/v1/messages", **route("messages"))
    async def messages(request: Request) -> Response:
        req = await read_request(request, MessagesRequest, body_limit)
        return await responder.respond(request, "messages", to_chat(req), view)

    @app.post("/v1/messages/count_tokens", **route("count_tokens"))
    async def count_tokens(request: Request) -> Response:
        req = await read_request(request, CountTokensRequest, body_limit)
        rid = request_id(request)
        chat = to_chat(req)
        prepared = await frontend.prepare_chat(frontend.model(chat.model).model, chat)
        return JSONResponse({"input_tokens": prepared.prompt_tokens}, headers={"x-request-id": rid})
