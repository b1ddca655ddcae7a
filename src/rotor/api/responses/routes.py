"""Registers `POST /v1/responses` on the app: HTTP in, `convert`, the
pipeline, `stream` out."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import Response

from rotor.api.body import read_request
from rotor.api.metrics import Metrics
from rotor.api.openapi import route
from rotor.api.respond import APIView, respond
from rotor.api.responses.convert import PARAMS, to_chat
from rotor.api.responses.stream import ResponseStream, fold_response
from rotor.api.sse import NAMED
from rotor.frontend import Frontend
from rotor.frontend import Response as ChatResponse
from rotor.protocol.responses import ResponsesRequest


def register_responses(app: FastAPI, frontend: Frontend, metrics: Metrics, body_limit: int) -> None:
    """Adds `POST /v1/responses` to the app."""

    @app.post("/v1/responses", **route("responses"))
    async def responses(request: Request) -> Response:
        req = await read_request(request, ResponsesRequest, body_limit)

        def view(resp: ChatResponse, rid: str) -> APIView:
            return APIView(ResponseStream(req, resp, rid), NAMED, fold_response)

        chat = to_chat(req)
        return await respond(request, frontend, metrics, "responses", chat, view, params=PARAMS)
