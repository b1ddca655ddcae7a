"""vLLM's scoring routes for pooling models: `POST /v1/score` (also `/score`)
and `POST /v1/rerank` (also `/rerank` and `/v2/rerank`, the Jina and Cohere
paths vLLM serves), behind the same admission queue as the generating routes
and counted in `rotor_requests_total{endpoint="score"|"rerank"}`.

A score answer lists each pair's score in the request's order; a rerank
answer lists the documents best first (the first `top_n` of them), each with
its index in the request and, unless `return_documents` is false, its text.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from rotor.api.body import read_request, request_id
from rotor.api.errors import REFUSALS, api_error
from rotor.api.openapi import route
from rotor.api.respond import UNKNOWN_MODEL, ClientGone, Responder
from rotor.api.sse import race_disconnect
from rotor.frontend import ModelEntry, Scored
from rotor.pipeline.score import Sides, ranked, rerank_sides, score_sides
from rotor.protocol.scores import RerankRequest, ScoreRequest

SCORE_PATHS = ("/v1/score", "/score")
RERANK_PATHS = ("/v1/rerank", "/rerank", "/v2/rerank")


def register_scores(app: FastAPI, responder: Responder, body_limit: int) -> None:
    frontend, metrics = responder.frontend, responder.metrics

    async def admitted(entry: ModelEntry, endpoint: str, both: Sides) -> Scored:
        async with responder.admission.queued():  # (no priority field: 0)
            return await frontend.score(entry, f"/v1/{endpoint}", both)

    async def scored(
        request: Request, endpoint: str, name: str | None, sides: Callable[[], Sides]
    ) -> tuple[ModelEntry, Sides, Scored]:
        """The request's sides (a RequestError when they do not pair up) and
        their scores; ClientGone when the client left first (in the admission
        line, or while its pairs were scored)."""
        label = UNKNOWN_MODEL
        try:
            entry = frontend.model(name)
            label = entry.model.name
            both = sides()
            work = await race_disconnect(admitted(entry, endpoint, both), request.receive)
            if work is None:
                metrics.disconnected.labels(label).inc()
                raise ClientGone
            done = work.result()
        except REFUSALS as e:
            error = api_error(e, None, responder.overload_status)
            metrics.outcome(label, endpoint, "false", str(error.status)).inc()
            raise error from None
        metrics.outcome(label, endpoint, "false", "200").inc()
        metrics.series(label).prompt_tokens.inc(done.prompt_tokens)
        return entry, both, done

    async def score(request: Request) -> Response:
        req = await read_request(request, ScoreRequest, body_limit)
        try:
            entry, _, done = await scored(request, "score", req.model, lambda: score_sides(req))
        except ClientGone:
            return Response(status_code=499)  # nginx's 499, as the other routes
        body = {
            "id": f"score-{request_id(request)}",
            "object": "list",
            "created": int(time.time()),
            "model": entry.name,
            "data": [
                {"index": i, "object": "score", "score": s} for i, s in enumerate(done.scores)
            ],
            "usage": {
                "prompt_tokens": done.prompt_tokens,
                "total_tokens": done.prompt_tokens,
                "completion_tokens": 0,
            },
        }
        return Response(orjson.dumps(body), media_type="application/json")

    async def rerank(request: Request) -> Response:
        req = await read_request(request, RerankRequest, body_limit)
        try:
            entry, sides, done = await scored(
                request, "rerank", req.model, lambda: rerank_sides(req)
            )
        except ClientGone:
            return Response(status_code=499)  # nginx's 499, as the other routes
        results = []
        for i in ranked(done.scores, req.top_n):
            result: dict[str, object] = {"index": i}
            if req.return_documents:
                result["document"] = {"text": sides.second[i]}
            result["relevance_score"] = done.scores[i]
            results.append(result)
        body = {
            "id": f"rerank-{request_id(request)}",
            "model": entry.name,
            "usage": {"prompt_tokens": done.prompt_tokens, "total_tokens": done.prompt_tokens},
            "results": results,
        }
        return Response(orjson.dumps(body), media_type="application/json")

    for path in SCORE_PATHS:
        app.post(path, **route("score"))(score)
    for path in RERANK_PATHS:
        app.post(path, **route("rerank"))(rerank)
