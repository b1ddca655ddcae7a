"""The ASGI app: OpenAI routes, health, metrics. Routes parse and validate;
the frontend runs the request; this module turns the result into HTTP."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from rotor import __version__
from rotor.api.anthropic import anthropic_model, anthropic_models, register_anthropic
from rotor.api.errors import APIError, error_response
from rotor.api.metrics import Metrics
from rotor.api.responses import register_responses
from rotor.api.route import (
    DEFAULT_BODY_LIMIT,
    APIView,
    chat_request,
    read_json,
    read_request,
    request_id,
    respond,
)
from rotor.api.sse import OPENAI
from rotor.frontend import Frontend, ModelNotFound
from rotor.frontend import Response as FrontendResponse
from rotor.pipeline.generate import Usage
from rotor.pipeline.preprocess import LONG_PROMPT_CHARS, RequestError, ServedModel
from rotor.pipeline.stream import aggregate_chat, aggregate_completion
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
        headers = {"x-request-id": request_id(request)}
        return error_response(exc.status, exc.message, exc.param, headers)

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

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        req = await read_request(request, ChatCompletionRequest, body_limit)
        return await respond(request, frontend, metrics, "chat", req, _openai(aggregate_chat))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        req = await read_request(request, CompletionRequest, body_limit)
        view = _openai(aggregate_completion)
        return await respond(
            request, frontend, metrics, "completions", req, view, call=frontend.completion
        )

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
        data = await read_json(request, body_limit)
        served = _resolve(frontend, data.get("model"))
        tok = _tokenizer(served)
        if "messages" in data:
            # The prompt exactly as chat prepares it, so `count` is chat's prompt_tokens.
            chat = chat_request(
                {
                    "model": data.get("model"),
                    "messages": data["messages"],
                    "add_generation_prompt": data.get("add_generation_prompt", True),
                    "tools": data.get("tools"),
                    "tool_choice": data.get("tool_choice"),
                    "chat_template_kwargs": data.get("chat_template_kwargs"),
                }
            )
            try:
                prepared = await frontend.prepare_chat(chat)
            except RequestError as e:
                raise APIError(e.status, str(e), e.param) from None
            ids = prepared.request.token_ids
        elif isinstance(data.get("prompt"), str):
            prompt: str = data["prompt"]
            special = data.get("add_special_tokens", True)
            ids = await _off_loop_if(
                len(prompt) > LONG_PROMPT_CHARS, tok.encode, prompt, add_special_tokens=special
            )
        else:
            raise APIError(400, "give either 'prompt' (a string) or 'messages'", "prompt")
        context = served.card.context_length
        return JSONResponse({"count": len(ids), "max_model_len": context, "tokens": ids})

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        data = await read_json(request, body_limit)
        tok = _tokenizer(_resolve(frontend, data.get("model")))
        ids = data.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise APIError(400, "'tokens' must be a list of token ids", "tokens")
        vocab = tok.vocab_size
        if any(t < 0 or t >= vocab for t in ids):
            raise APIError(400, f"token ids must be in [0, {vocab})", "tokens")
        text = await _off_loop_if(
            len(ids) > LONG_PROMPT_CHARS, tok.decode, ids, skip_special_tokens=False
        )
        return JSONResponse({"prompt": text})

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
        self.api_key = api_key.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            headers = dict(scope["headers"])
            auth = headers.get(b"authorization", b"")
            token = auth[7:] if auth[:7].lower() == b"bearer " else None
            if token is None:
                token = headers.get(b"x-api-key", b"") or None
            if token is None or not hmac.compare_digest(token, self.api_key):
                response = error_response(401, "invalid or missing API key")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


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


def _openai(
    fold: Callable[[list[dict[str, Any]], int, Usage], dict[str, Any]],
) -> Callable[[FrontendResponse, str], APIView]:
    """OpenAI's view of a response: its chunks as they are, `fold` for the body."""
    return lambda resp, rid: APIView(OPENAI, lambda chunks: fold(chunks, resp.n, resp.usage))


def _tokenizer(served: ServedModel) -> Any:
    if served.tokenizer is None:
        raise APIError(400, f"model {served.card.name!r} has no tokenizer")
    return served.tokenizer


async def _off_loop_if(long: bool, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)`, in a worker thread when the input is long."""
    if long:
        return await asyncio.to_thread(fn, *args, **kwargs)
    return fn(*args, **kwargs)
