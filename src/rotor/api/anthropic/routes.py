"""Registers the Anthropic routes (`/v1/messages`, `/v1/messages/count_tokens`)
and their error envelope on the app: HTTP in, `convert`, the pipeline,
`stream` out.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from rotor.api.anthropic.convert import to_chat
from rotor.api.anthropic.errors import AnthropicErrors
from rotor.api.anthropic.stream import PING_INTERVAL_S, MessageStream, fold_message, with_pings
from rotor.api.errors import APIError
from rotor.api.metrics import Metrics
from rotor.api.route import APIView, read_request, request_id, respond
from rotor.api.sse import NamedFraming
from rotor.frontend import Frontend, ModelNotFound
from rotor.frontend import Response as ChatResponse
from rotor.pipeline.preprocess import RequestError
from rotor.protocol.anthropic import CountTokensRequest, MessagesRequest


def register_anthropic(app: FastAPI, frontend: Frontend, metrics: Metrics) -> None:
    """Adds the Anthropic routes and their error envelope. Call it after any
    middleware whose errors should be enveloped too (`--api-key`)."""
    app.add_middleware(AnthropicErrors)

    def view(resp: ChatResponse, rid: str) -> APIView:
        shaper = MessageStream(resp, rid, frontend.reasoning_field)
        framing = NamedFraming(shaper.fail, wrap=lambda e: with_pings(e, PING_INTERVAL_S))
        return APIView(framing, fold_message, shaper)

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        req = await read_request(request, MessagesRequest, request.app.state.body_limit)
        return await respond(request, frontend, metrics, "messages", to_chat(req), view)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> Response:
        req = await read_request(request, CountTokensRequest, request.app.state.body_limit)
        rid = request_id(request)
        try:
            prepared = await frontend.prepare_chat(to_chat(req))
        except ModelNotFound as e:
            raise APIError(404, str(e), "model") from None
        except RequestError as e:
            raise APIError(e.status, str(e), e.param) from None
        return JSONResponse({"input_tokens": prepared.prompt_tokens}, headers={"x-request-id": rid})
