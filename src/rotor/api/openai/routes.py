"""OpenAI's routes: chat completions, completions, models."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from rotor.api.anthropic.models import anthropic_model, anthropic_models
from rotor.api.body import read_request
from rotor.api.openai.chat import ChatShaper, chat_body
from rotor.api.openai.completions import CompletionShaper, completion_body
from rotor.api.openai.logprobs import PromptAsk
from rotor.api.openapi import route
from rotor.api.respond import APIView, Responder
from rotor.api.sse import OPENAI
from rotor.frontend import ModelEntry, StartedResponse
from rotor.model.card import ModelCard
from rotor.pipeline.served import ServedModel
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest


def register_openai(app: FastAPI, responder: Responder, body_limit: int) -> None:
    frontend = responder.frontend

    @app.post("/v1/chat/completions", **route("chat"))
    async def chat_completions(request: Request) -> Response:
        req = await read_request(request, ChatCompletionRequest, body_limit)
        options = req.stream_options
        field = frontend.reasoning_field
        ids = bool(req.return_token_ids)
        prompt = PromptAsk.of(req)

        def view(resp: StartedResponse, rid: str) -> APIView:
            return APIView(
                lambda: ChatShaper(
                    resp,
                    field,
                    include_usage=bool(options and options.include_usage),
                    continuous_usage=bool(options and options.continuous_usage_stats),
                    token_ids=ids,
                ),
                OPENAI,
                lambda choices: chat_body(resp, choices, field, ids, prompt.listed),
            )

        return await responder.respond(request, "chat", req, view, params=req.error_params())

    @app.post("/v1/completions", **route("completions"))
    async def completions(request: Request) -> Response:
        req = await read_request(request, CompletionRequest, body_limit)
        options = req.stream_options
        ids = bool(req.return_token_ids)
        prompt = PromptAsk.of(req)

        def view(resp: StartedResponse, rid: str) -> APIView:
            echo = echo_texts(resp.served, req) if req.echo else None
            return APIView(
                lambda: CompletionShaper(
                    resp,
                    include_usage=bool(options and options.include_usage),
                    continuous_usage=bool(options and options.continuous_usage_stats),
                    echo=echo,
                    n=req.n,
                    token_ids=ids,
                    ask=prompt,
                ),
                OPENAI,
                lambda choices: completion_body(resp, choices, echo, req.n, ids, prompt),
            )

        return await responder.respond(
            request,
            "completions",
            req,
            view,
            begin=frontend.completion,
            params=req.error_params(),
        )

    @app.get("/v1/models", **route("models"))
    async def list_models(request: Request) -> Response:
        entries = [e for e in frontend.registry.listed() if e.live()]
        if "anthropic-version" in request.headers:
            return JSONResponse(anthropic_models([(e.model, e.name) for e in entries]))
        return JSONResponse({"object": "list", "data": [model_entry(e) for e in entries]})

    @app.get("/v1/models/{model_id:path}", **route("model"))
    async def get_model(request: Request, model_id: str) -> Response:
        entry = frontend.live_model(model_id)  # ModelNotFound: the 404 naming it
        if "anthropic-version" in request.headers:
            return JSONResponse(anthropic_model(entry.model, entry.name))
        return JSONResponse(model_entry(entry))


def echo_texts(model: ServedModel, req: CompletionRequest) -> list[str]:
    """Each prompt as text, for `echo`: token ids decoded with specials kept."""
    tok = model.tokenizer
    return [
        p if isinstance(p, str) else tok.decode(p, skip_special_tokens=False) if tok else ""
        for p in req.prompts()
    ]


def _task(card: ModelCard) -> str:
    """What the model is served for: generate, embed, or score (a cross-encoder)."""
    caps = card.capabilities
    if caps.generates:
        return "generate"
    return "score" if caps.scores_pairs else "embed"


def model_entry(entry: ModelEntry) -> dict[str, Any]:
    """OpenAI's model object under the entry's name, with vLLM's `root` (the
    canonical name: a model's aliases share it; a LoRA adapter's directory,
    with its model as `parent`); a model served by workers also names its
    live workers by pool (`decode`, `prefill`)."""
    card = entry.model.card
    out: dict[str, Any] = {
        "id": entry.name,
        "object": "model",
        "created": card.created,
        "owned_by": "rotor",
        "root": entry.lora_path or card.name,
        "parent": card.name if entry.lora is not None else None,
        "max_model_len": card.context_length,
        "task": _task(card),
    }
    if card.capabilities.embedding_dim:
        out["embedding_dim"] = card.capabilities.embedding_dim
    if entry.remote is not None:
        out["pools"] = entry.remote.pools()
    return out
