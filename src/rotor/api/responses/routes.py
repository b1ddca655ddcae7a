"""Registers the Responses routes on the app: `POST /v1/responses` (HTTP in,
`convert`, the pipeline, `stream` or `items.response_body` out; kept in the
store unless `store` is false, continuing a stored one by
`previous_response_id`, or run in the background), and the stored ones'
`GET`, `DELETE`, `GET .../input_items` and `POST .../cancel`.

A response is stored when it is whole. Not streamed: before it is returned
(a store that fails is a 503, never a response that says it was stored).
Streamed: `in_progress` before its first event (a 503 then), and as it
ended once its stream is over (the client left mid-stream: `cancelled`,
with the items it got so far). A request that fails before its response
starts leaves nothing stored.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from rotor.api.body import read_request, request_id
from rotor.api.errors import APIError
from rotor.api.openapi import route
from rotor.api.respond import APIView, Responder
from rotor.api.responses import chain
from rotor.api.responses.background import ENDPOINT, Background, Job
from rotor.api.responses.convert import PARAMS, to_chat
from rotor.api.responses.items import response, response_body, response_head, response_id
from rotor.api.responses.listing import page, page_query
from rotor.api.responses.record import Record
from rotor.api.responses.store import ResponseStore, tenant_of
from rotor.api.responses.stored import Stored, not_found
from rotor.api.responses.stream import ResponseStream
from rotor.api.sse import NAMED
from rotor.api.sse_response import SSEResponse
from rotor.frontend import ModelEntry, StartedResponse
from rotor.protocol.openai import ChatCompletionRequest
from rotor.protocol.responses import ResponsesRequest

Stop = Callable[[], Awaitable[None]]


def register_responses(
    app: FastAPI, responder: Responder, body_limit: int, store: ResponseStore
) -> Stop:
    """Adds the Responses routes to the app, keeping responses in `store`.
    Returns what the app runs when it stops serving: the background
    responses still running end (failed), and the store's last writes go."""
    stored = Stored(store)
    background = Background(responder, stored)

    @app.post("/v1/responses", **route("responses"))
    async def responses(request: Request) -> Response:
        req = await read_request(request, ResponsesRequest, body_limit)
        tenant = tenant_of(request.scope)
        rid = request_id(request)
        previous: Record | None = None
        if req.previous_response_id is not None:
            previous = await stored.load(tenant, req.previous_response_id, "previous_response_id")
            if not previous.finished:
                raise APIError(
                    400,
                    f"the previous response {previous.id!r} is still {previous.status}: "
                    "continue it once it has finished",
                    "previous_response_id",
                )
        history = chain.history(previous)
        chat = to_chat(req, chain.as_input(history))
        if not req.store:

            def view(resp: StartedResponse, rid: str) -> APIView:
                head = response_head(req, resp.model, resp.created, rid)
                return APIView(
                    lambda: ResponseStream(head, resp, rid),
                    NAMED,
                    lambda c: response_body(head, rid, c[0], resp.usage),
                )

            return await responder.respond(request, ENDPOINT, chat, view, params=PARAMS)

        entry = responder.lookup(chat, ENDPOINT)
        rid_of_client = request.headers.get("x-request-id") == rid
        if rid_of_client and await stored.exists(tenant, response_id(rid)):
            raise APIError(
                409,
                f"a response {response_id(rid)!r} is stored already: "
                "a stored response's x-request-id must be new",
                "x-request-id",
            )
        head = response_head(req, entry.name, int(time.time()), rid)
        conversation = [*history, *chain.request_items(req, rid)]
        if req.background:
            job = Job(tenant, rid, chat, entry, head, conversation)
            queued = job.record("queued", [])
            await stored.save(tenant, queued)
            background.start(job)
            return _json(queued.response, {"x-request-id": rid})
        if req.stream:
            return await _streamed(request, chat, entry, head, conversation)
        built: list[dict[str, Any]] = []

        def collected(resp: StartedResponse, rid: str) -> APIView:
            def body(choices: list[Any]) -> dict[str, Any]:
                built.append(response_body(head, rid, choices[0], resp.usage))
                return built[0]

            return APIView(lambda: ResponseStream(head, resp, rid), NAMED, body)

        answer = await responder.respond(
            request, ENDPOINT, chat, collected, params=PARAMS, entry=entry
        )
        if built:
            await stored.save(tenant, Record(built[0], conversation))
        return answer

    async def _streamed(
        request: Request,
        chat: ChatCompletionRequest,
        entry: ModelEntry,
        head: dict[str, Any],
        conversation: list[dict[str, Any]],
    ) -> Response:
        """A stored stream: `in_progress` first, as it ended at its end."""
        tenant = tenant_of(request.scope)
        await stored.save(tenant, Record(response(head, "in_progress", []), conversation))

        def view(resp: StartedResponse, rid: str) -> APIView:
            shapers: list[ResponseStream] = []

            def shaper() -> ResponseStream:
                shapers.append(ResponseStream(head, resp, rid))
                return shapers[0]

            def finished(complete: bool) -> None:
                shaped = shapers[0]
                body = shaped.final if shaped.final is not None else shaped.cancelled()
                stored.update_later(tenant, Record(body, conversation))

            return APIView(
                shaper,
                NAMED,
                lambda c: response_body(head, rid, c[0], resp.usage),
                finished,
            )

        try:
            answer = await responder.respond(
                request, ENDPOINT, chat, view, params=PARAMS, entry=entry
            )
        except Exception:
            await stored.forget(tenant, head["id"])
            raise
        if not isinstance(answer, SSEResponse):  # the client left before it began
            await stored.forget(tenant, head["id"])
        return answer

    @app.get("/v1/responses/{response_id}", **route("get_response"))
    async def get_response(
        request: Request, response_id: str, stream: str | None = None
    ) -> Response:
        if stream is not None and stream.lower() not in ("false", "0"):
            raise APIError(
                400, "rotor does not stream a stored response again: GET it as JSON", "stream"
            )
        record = await stored.load(tenant_of(request.scope), response_id)
        return _json(record.response)

    @app.delete("/v1/responses/{response_id}", **route("delete_response"))
    async def delete_response(request: Request, response_id: str) -> Response:
        tenant = tenant_of(request.scope)
        if not await stored.delete(tenant, response_id):
            raise not_found(response_id)
        await background.halt(tenant, response_id)  # it stays deleted (background.py)
        return _json({"id": response_id, "object": "response", "deleted": True})

    @app.get("/v1/responses/{response_id}/input_items", **route("input_items"))
    async def input_items(
        request: Request,
        response_id: str,
        limit: str | None = None,
        order: str | None = None,
        after: str | None = None,
    ) -> Response:
        query = page_query(limit, order, after)
        record = await stored.load(tenant_of(request.scope), response_id)
        return _json(page(record.input, query))

    @app.post("/v1/responses/{response_id}/cancel", **route("cancel_response"))
    async def cancel_response(request: Request, response_id: str) -> Response:
        tenant = tenant_of(request.scope)
        record = await stored.load(tenant, response_id)
        if not record.background:
            raise APIError(
                400,
                f"only a background response can be cancelled: {response_id!r} "
                "was not created with background true",
            )
        if not record.finished:
            found = await background.cancel(tenant, response_id)
            if found is None:
                raise not_found(response_id)
            record = found
        return _json(record.response)

    async def stop() -> None:
        await background.stop()
        await stored.drain()

    return stop


def _json(body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), media_type="application/json", headers=headers)
