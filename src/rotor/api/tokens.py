"""`/tokenize` and `/detokenize` (vLLM's shape): the served model's tokenizer,
and for `messages` the prompt exactly as chat prepares it."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from rotor.api.body import read_json, validated
from rotor.api.errors import APIError
from rotor.api.openapi import route
from rotor.frontend import Frontend
from rotor.model.tokenizer import Tokenizer
from rotor.pipeline.bounds import check_prompt_size
from rotor.pipeline.preprocess import LONG_PROMPT_CHARS
from rotor.pipeline.served import ServedModel
from rotor.protocol.openai import ChatCompletionRequest


def register_tokens(app: FastAPI, frontend: Frontend, body_limit: int) -> None:
    @app.post("/tokenize", **route("tokenize"))
    async def tokenize(request: Request) -> Response:
        data = await read_json(request, body_limit)
        served = _resolve(frontend, data.get("model"))
        tok = _tokenizer(served)
        if "messages" in data:
            # The prompt exactly as chat prepares it, so `count` is chat's prompt_tokens.
            fields = {
                "model": data.get("model"),
                "messages": data["messages"],
                "add_generation_prompt": data.get("add_generation_prompt", True),
                "tools": data.get("tools"),
                "tool_choice": data.get("tool_choice"),
                "chat_template_kwargs": data.get("chat_template_kwargs"),
            }
            chat = validated(
                ChatCompletionRequest, {k: v for k, v in fields.items() if v is not None}
            )
            ids = (await frontend.prepare_chat(served, chat)).token_ids
        elif isinstance(data.get("prompt"), str):
            prompt: str = data["prompt"]
            special = data.get("add_special_tokens", True)
            if not isinstance(special, bool):
                raise APIError(400, "'add_special_tokens' must be a boolean", "add_special_tokens")
            check_prompt_size(served, "prompt", "prompt", prompt)
            if len(prompt) > LONG_PROMPT_CHARS:
                ids = await frontend.preparer.run(tok.encode, prompt, add_special_tokens=special)
            else:
                ids = tok.encode(prompt, add_special_tokens=special)
        else:
            raise APIError(400, "give either 'prompt' (a string) or 'messages'", "prompt")
        context = served.card.context_length
        return JSONResponse({"count": len(ids), "max_model_len": context, "tokens": ids})

    @app.post("/detokenize", **route("detokenize"))
    async def detokenize(request: Request) -> Response:
        data = await read_json(request, body_limit)
        tok = _tokenizer(_resolve(frontend, data.get("model")))
        ids = data.get("tokens")
        if not isinstance(ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in ids
        ):
            raise APIError(400, "'tokens' must be a list of token ids", "tokens")
        vocab = tok.vocab_size
        if any(t < 0 or t >= vocab for t in ids):
            raise APIError(400, f"token ids must be in [0, {vocab})", "tokens")
        if len(ids) > LONG_PROMPT_CHARS:
            text = await frontend.preparer.run(tok.decode, ids, skip_special_tokens=False)
        else:
            text = tok.decode(ids, skip_special_tokens=False)
        return JSONResponse({"prompt": text})


def _resolve(frontend: Frontend, name: Any) -> ServedModel:
    if name is not None and not isinstance(name, str):
        raise APIError(400, "'model' must be a string", "model")
    return frontend.model(name).model


def _tokenizer(served: ServedModel) -> Tokenizer:
    if served.tokenizer is None:
        raise APIError(400, f"model {served.card.name!r} has no tokenizer")
    return served.tokenizer
