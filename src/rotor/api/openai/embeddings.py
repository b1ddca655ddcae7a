"""OpenAI's `POST /v1/embeddings`: one vector per input, as numbers or as
base64 float32s, behind the same admission queue as the generating routes
(at priority 0), and counted in `rotor_requests_total{endpoint="embeddings"}`.
A client that leaves before its vectors are ready leaves the line, or stops
the work, at once."""

from __future__ import annotations

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from rotor.api.body import read_request
from rotor.api.errors import REFUSALS, api_error
from rotor.api.openapi import route
from rotor.api.respond import UNKNOWN_MODEL, Responder
from rotor.api.sse import race_disconnect
from rotor.frontend import Embedded, ModelEntry
from rotor.pipeline.embed import encoded
from rotor.protocol.embeddings import EmbeddingRequest

ENDPOINT = "embeddings"


def register_embeddings(app: FastAPI, responder: Responder, body_limit: int) -> None:
    frontend, metrics = responder.frontend, responder.metrics

    async def embedded(entry: ModelEntry, req: EmbeddingRequest) -> Embedded:
        async with responder.admission.queued():  # (no priority field: 0)
            return await frontend.embed(entry, req)

    @app.post("/v1/embeddings", **route(ENDPOINT))
    async def embeddings(request: Request) -> Response:
        req = await read_request(request, EmbeddingRequest, body_limit)
        label = UNKNOWN_MODEL
        try:
            entry = frontend.model(req.model)
            label = entry.model.name
            work = await race_disconnect(embedded(entry, req), request.receive)
            if work is None:  # the client left (in line, or while its inputs were embedded)
                metrics.disconnected.labels(label).inc()
                return Response(status_code=499)  # nginx's 499, as the generating routes
            done = work.result()
        except REFUSALS as e:
            error = api_error(e, None, responder.overload_status)
            metrics.outcome(label, ENDPOINT, "false", str(error.status)).inc()
            raise error from None
        metrics.outcome(label, ENDPOINT, "false", "200").inc()
        metrics.series(label).prompt_tokens.inc(done.prompt_tokens)
        fmt = req.encoding_format
        body = {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": encoded(vector, fmt)}
                for i, vector in enumerate(done.vectors)
            ],
            "model": entry.name,
            "usage": {"prompt_tokens": done.prompt_tokens, "total_tokens": done.prompt_tokens},
        }
        return Response(orjson.dumps(body), media_type="application/json")
