"""Registers `POST /v1/responses` on the app: HTTP in, `convert`, the
pipeline, `stream` out."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import Response

from rotor.api.metrics import Metrics
from rotor.api.responses.convert import _PARAMS, to_chat
from rotor.api.responses.stream import ResponseStream, fold_response
from rotor.api.route import APIView, read_request, respond
from rotor.api.sse import NamedFraming
from rotor.frontend import Frontend
from rotor.frontend import Response as ChatResponse
from rotor.protocol.responses import ResponsesRequest


def register_responses(app: FastAPI, frontend: Frontend, metrics: Metrics) -> None:
    """Adds `POST /v1/responses` to the app."""

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        req = await read_request(request, ResponsesRequest, request.app.state.body_limit)

        def view(resp: ChatResponse, rid: str) -> APIView:
            shaper = ResponseStream(req, resp, rid, frontend.reasoning_field)
            return APIView(NamedFraming(shaper.fail), fold_response, shaper)

        chat = to_chat(req)
        return await respond(request, frontend, metrics, "responses", chat, view, params=_PARAMS)
