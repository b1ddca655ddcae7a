"""The ASGI app: OpenAI routes, health, metrics. Routes parse and validate;
the frontend runs the request; this module turns the result into HTTP."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from rotor import __version__
from rotor.api.anthropic import anthropic_model, anthropic_models, register_anthropic
from rotor.api.errors import APIError, describe_validation, error_response
from rotor.api.metrics import Metrics
from rotor.api.responses import register_responses
from rotor.api.route import (
    DEFAULT_BODY_LIMIT,
    ClientGone,
    client_gone,
    collect,
    disconnect_counter,
    observed,
    read_request,
    request_id,
    start,
)
from rotor.api.sse import DONE, SSEResponse, sse_error, sse_event
from rotor.frontend import Frontend, ModelNotFound
from rotor.frontend import Response as FrontendResponse
from rotor.pipeline.preprocess import RequestError
from rotor.pipeline.stream import RequestFailed, aggregate_chat, aggregate_completion
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest

log = logging.getLogger("rotor.api")


def create_app(
    frontend: Frontend, api_key: str | None = None, body_limit: int = DEFAULT_BODY_LIMIT
) -> FastAPI:
    metrics = Metrics(engine_state=frontend.engine.state)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await frontend.start()
        try:
            yield
        finally:
            await frontend.stop()

    app = FastAPI(title="rotor", version=__version__, lifespan=lifespan)
    app.state.frontend = frontend
    app.state.metrics = metrics
    app.state.body_limit = body_limit

    # -- errors --------------------------------------------------------------------

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> Response:
        return error_response(exc.status, exc.message, exc.param, _rid_header(request))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return error_response(exc.status_code, message, headers=exc.headers)

    if api_key:
        app.add_middleware(APIKeyMiddleware, api_key=api_key)

    # -- OpenAI routes ---------------------------------------------------------------

    async def run(
        request: Request,
        endpoint: str,
        req: ChatCompletionRequest | CompletionRequest,
        call: Any,
        fold: Any,
    ) -> Response:
        rid = request_id(request)
        t0 = time.perf_counter()
        resp: FrontendResponse = await start(call, req, rid, metrics, endpoint, frontend)
        headers = {"x-request-id": rid}
        chunks = observed(resp, metrics, endpoint, req.stream, t0)
        if req.stream:
            return SSEResponse(
                _openai_sse(chunks), headers, disconnect_counter(metrics, resp.model)
            )
        try:
            items = await collect(request, chunks, disconnect_counter(metrics, resp.model))
        except ClientGone:
            return client_gone()
        except RequestFailed as e:
            return error_response(500, str(e), headers=headers)
        body = fold(items, resp.n, resp.usage)
        return Response(orjson.dumps(body), media_type="application/json", headers=headers)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        req = await read_request(request, ChatCompletionRequest, body_limit)
        return await run(request, "chat", req, frontend.chat, aggregate_chat)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        req = await read_request(request, CompletionRequest, body_limit)
        return await run(request, "completions", req, frontend.completion, aggregate_completion)

    @app.get("/v1/models")
    async def list_models(request: Request) -> Response:
        if "anthropic-version" in request.headers:
            return JSONResponse(anthropic_models(frontend))
        return JSONResponse({"object": "list", "data": [_model_entry(frontend)]})

    @app.get("/v1/models/{model_id:path}")
    async def get_model(request: Request, model_id: str) -> Response:
        if model_id not in frontend.model_names:
            raise APIError(404, f"the model {model_id!r} does not exist", "model")
        if "anthropic-version" in request.headers:
            return JSONResponse(anthropic_model(frontend))
        return JSONResponse(_model_entry(frontend))

    # -- Anthropic Messages, OpenAI Responses (after the API-key middleware) -------------

    register_anthropic(app, frontend, metrics)
    register_responses(app, frontend, metrics)

    # -- tokens ----------------------------------------------------------------------

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        data = await _json(request)
        served = _resolve(frontend, data.get("model"))
        tok = served.tokenizer
        if tok is None:
            raise APIError(400, f"model {served.card.name!r} has no tokenizer")
        if "messages" in data:
            try:
                chat = ChatCompletionRequest.model_validate(
                    {
                        "messages": data["messages"],
                        "add_generation_prompt": data.get("add_generation_prompt", True),
                        "tools": data.get("tools"),
                        "chat_template_kwargs": data.get("chat_template_kwargs"),
                    }
                )
            except ValidationError as e:
                message, param = describe_validation(e)
                raise APIError(400, message, param) from None
            from rotor.pipeline.preprocess import render_chat

            try:
                text = render_chat(served, chat, tools_active=bool(chat.tools))
            except RequestError as e:
                raise APIError(400, str(e), e.param) from None
            ids = tok.encode(text)
        elif isinstance(data.get("prompt"), str):
            ids = tok.encode(
                data["prompt"], add_special_tokens=data.get("add_special_tokens", True)
            )
        else:
            raise APIError(400, "give either 'prompt' (a string) or 'messages'", "prompt")
        return JSONResponse(
            {"count": len(ids), "max_model_len": served.card.context_length, "tokens": ids}
        )

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        data = await _json(request)
        served = _resolve(frontend, data.get("model"))
        tok = served.tokenizer
        ids = data.get("tokens")
        if tok is None:
            raise APIError(400, f"model {served.card.name!r} has no tokenizer")
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise APIError(400, "'tokens' must be a list of token ids", "tokens")
        if any(t < 0 or t >= tok.vocab_size for t in ids):
            raise APIError(400, f"token ids must be in [0, {tok.vocab_size})", "tokens")
        return JSONResponse({"prompt": tok.decode(ids, skip_special_tokens=False)})

    # -- operations ------------------------------------------------------------------

    @app.get("/health")
    async def health() -> Response:
        body = {
            "status": "ok" if frontend.started else "starting",
            "models": frontend.model_names,
            "engine": frontend.engine.state(),
        }
        return JSONResponse(body, status_code=200 if frontend.started else 503)

    @app.get("/live")
    async def live() -> Response:
        return JSONResponse({"status": "live"})

    @app.get("/metrics")
    async def metrics_route() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return app


class APIKeyMiddleware:
    """`--api-key`: /v1/* needs `Authorization: Bearer KEY` (or `x-api-key: KEY`).

    Plain ASGI, so streaming responses pass through untouched."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            headers = dict(scope["headers"])
            auth = headers.get(b"authorization", b"").decode("latin-1")
            token = auth[7:] if auth.lower().startswith("bearer ") else None
            if token is None:
                token = headers.get(b"x-api-key", b"").decode("latin-1") or None
            if token != self.api_key:
                response = error_response(401, "invalid or missing API key")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _rid_header(request: Request) -> dict[str, str] | None:
    rid = request.headers.get("x-request-id")
    return {"x-request-id": rid} if rid else None


async def _json(request: Request) -> dict[str, Any]:
    try:
        data = orjson.loads(await request.body())
    except orjson.JSONDecodeError as e:
        raise APIError(400, f"malformed JSON body: {e}") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    return data


def _resolve(frontend: Frontend, name: str | None) -> Any:
    try:
        return frontend.resolve(name)
    except ModelNotFound as e:
        raise APIError(404, str(e), "model") from None


def _model_entry(frontend: Frontend) -> dict[str, Any]:
    card = frontend.model.card
    return {
        "id": card.name,
        "object": "model",
        "created": card.created,
        "owned_by": "rotor",
        "max_model_len": card.context_length,
    }


async def _openai_sse(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """OpenAI's SSE framing: `data: <chunk>` events, then `data: [DONE]`; a failure
    after the first chunk is an error event, then `[DONE]`."""
    try:
        async for chunk in chunks:
            yield sse_event(chunk)
        yield DONE
    except RequestFailed as e:
        yield sse_error(500, str(e))
        yield DONE
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
