"""Registers `POST /v1/responses` on the app: HTTP in, `convert`, the
pipeline, `stream` (or `items.response_body`) out."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import Response

from rotor.api.body import read_request
from rotor.api.openapi import route
from rotor.api.respond import APIView, Responder
from rotor.api.responses.convert import PARAMS, to_chat
from rotor.api.responses.items import response_body, response_head
from rotor.api.responses.stream import ResponseStream
from rotor.api.sse import NAMED
from rotor.frontend import StartedResponse
from rotor.protocol.responses import ResponsesRequest


def register_responses(app: FastAPI, responder: Responder, body_limit: int) -> None:
    """Adds `POST /v1/responses` to the app."""

    @app.post("/v1/responses", **route("responses"))
    async def responses(request: Request) -> Response:
        req = await read_request(request, ResponsesRequest, body_limit)

        def view(resp: StartedResponse, rid: str) -> APIView:
            head = response_head(req, resp, rid)
            return APIView(
                lambda: ResponseStream(head, resp, rid),
                NAMED,
                lambda c: response_body(head, rid, c[0], resp.usage),
            )

        return await responder.respond(request, "responses", to_chat(req), view, params=PARAMS)
