"""Registers the Anthropic routes (`/v1/messages`, `/v1/messages/count_tokens`)
on the app: HTTP in, `convert`, the pipeline, `stream` out. Their errors leave
in Anthropic's envelope (api/errors.is_anthropic)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from rotor.api.anthropic.convert import to_chat
from rotor.api.anthropic.stream import PING_INTERVAL_S, MessageStream, fold_message, with_pings
from rotor.api.body import read_request, request_id
from rotor.api.errors import APIError, from_request_error
from rotor.api.metrics import Metrics
from rotor.api.openapi import route
from rotor.api.respond import APIView, respond
from rotor.api.sse import NamedFraming
from rotor.frontend import Frontend, ModelNotFound
from rotor.frontend import Response as ChatResponse
from rotor.pipeline.errors import RequestError
from rotor.protocol.anthropic import CountTokensRequest, MessagesRequest

FRAMING = NamedFraming(wrap=lambda events: with_pings(events, PING_INTERVAL_S))


def register_anthropic(app: FastAPI, frontend: Frontend, metrics: Metrics, body_limit: int) -> None:
    def view(resp: ChatResponse, rid: str) -> APIView:
        return APIView(MessageStream(resp, rid), FRAMING, fold_message)

    @app.post("/v1/messages", **route("messages"))
    async def messages(request: Request) -> Response:
        req = await read_request(request, MessagesRequest, body_limit)
        return await respond(request, frontend, metrics, "messages", to_chat(req), view)

    @app.post("/v1/messages/count_tokens", **route("count_tokens"))
    async def count_tokens(request: Request) -> Response:
        req = await read_request(request, CountTokensRequest, body_limit)
        rid = request_id(request)
        try:
            prepared = await frontend.prepare_chat(to_chat(req))
        except ModelNotFound as e:
            raise APIError(404, str(e), "model") from None
        except RequestError as e:
            raise from_request_error(e) from None
        return JSONResponse({"input_tokens": prepared.prompt_tokens}, headers={"x-request-id": rid})
