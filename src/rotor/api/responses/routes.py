"""Registers `POST /v1/responses` on the app: HTTP in, `convert`, the
pipeline, `stream` out."""

from __future__ import annotations

import time

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from rotor.api.errors import error_response
from rotor.api.metrics import Metrics
from rotor.api.responses.convert import _PARAMS, to_chat
from rotor.api.responses.stream import ResponseStream, fold_response
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
from rotor.frontend import Frontend
from rotor.protocol.responses import ResponsesRequest


def register_responses(app: FastAPI, frontend: Frontend, metrics: Metrics) -> None:
    """Adds `POST /v1/responses` to the app."""

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        req = await read_request(request, ResponsesRequest, request.app.state.body_limit)
        rid = request_id(request)
        chat = to_chat(req)
        t0 = time.perf_counter()
        resp = await start_chat(frontend, chat, rid, metrics, "responses", _PARAMS)
        shaper = ResponseStream(req, resp, rid, frontend.reasoning_field)
        chunks = observed(resp, metrics, "responses", req.stream, t0)
        headers = {"x-request-id": rid}
        events = shaped_events(shaper, chunks)
        if req.stream:
            return SSEResponse(sse_body(events), headers, disconnect_counter(metrics, resp.model))
        try:
            gone = disconnect_counter(metrics, resp.model)
            body = fold_response(await collect(request, events, gone))
        except ClientGone:
            return client_gone()
        if body["status"] == "failed":
            return error_response(500, body["error"]["message"], headers=headers)
        return Response(orjson.dumps(body), media_type="application/json", headers=headers)
