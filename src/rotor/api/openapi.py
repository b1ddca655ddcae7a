"""The OpenAPI document: each route's request body, answers and errors.

Routes read and validate their bodies themselves (api/body.py), so FastAPI
knows nothing of them; `route(name)` gives each route's decorator the
document's view of it instead (`openapi_extra` with the request body,
`responses` with the 200 answer, its event stream and the error envelopes),
and `install` fills `components/schemas` from the very models that validate
requests (protocol/*) and those that describe answers (api/schemas.py).
Nothing here runs per request: FastAPI builds the document once, on the
first GET /openapi.json.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.responses import PlainTextResponse

from rotor.api.auth import guarded
from rotor.protocol import ignored
from rotor.protocol.anthropic import CountTokensRequest, MessagesRequest
from rotor.protocol.embeddings import EmbeddingRequest
from rotor.protocol.lora import LoadLoraRequest, UnloadLoraRequest
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest
from rotor.protocol.responses import ResponsesRequest
from rotor.protocol.scores import RerankRequest, ScoreRequest

REF = "#/components/schemas/{model}"

_ERRORS = {
    400: "the request is malformed or refused; the message names the field (`param`)",
    401: "with --api-key: the key is missing or wrong",
    404: "no such model, route or stored response",
    409: "the client's x-request-id names a response stored already",
    413: "the body is over the size limit",
    500: "an internal error (the server's log has the details)",
    503: (
        "the engine or the response store is unavailable, or the queue is full (`Retry-After: 1`)"
    ),
}
_GENERATION_ERRORS = (400, 401, 404, 413, 500, 503)
_TEXT_ERRORS = (400, 401, 404, 413, 500)
_STORED_ERRORS = (400, 401, 404, 500, 503)


@dataclass(frozen=True)
class Doc:
    """One route in the document."""

    summary: str
    tag: str
    answer: str | tuple[str, ...] | None  # component names; None: text/plain
    request: str | None = None
    example: dict[str, Any] | None = None
    stream: str | None = None  # what `"stream": true` answers, as text/event-stream
    errors: tuple[int, ...] = ()
    anthropic: bool = False  # errors in Anthropic's envelope


_HELLO = [{"role": "user", "content": "Hello!"}]

DOCS: dict[str, Doc] = {
    "chat": Doc(
        "Chat completion",
        "OpenAI",
        "ChatCompletion",
        "ChatCompletionRequest",
        {"messages": _HELLO},
        "server-sent events, each `data:` a ChatCompletionChunk, then `data: [DONE]`",
        _GENERATION_ERRORS,
    ),
    "completions": Doc(
        "Text completion",
        "OpenAI",
        "Completion",
        "CompletionRequest",
        {"prompt": "Hello!", "max_tokens": 16},
        "server-sent events, each `data:` a CompletionChunk, then `data: [DONE]`",
        _GENERATION_ERRORS,
    ),
    "embeddings": Doc(
        "Embeddings",
        "OpenAI",
        "EmbeddingList",
        "EmbeddingRequest",
        {"input": "Hello!"},
        errors=_GENERATION_ERRORS,
    ),
    "score": Doc(
        "Scores of text pairs (pooling models: a cross-encoder, or an embedding model's cosine)",
        "Scoring",
        "ScoreList",
        "ScoreRequest",
        {"queries": "What is the capital of France?", "documents": ["Paris.", "Berlin."]},
        errors=_GENERATION_ERRORS,
    ),
    "rerank": Doc(
        "Documents ranked by relevance to a query (Jina's and Cohere's shape)",
        "Scoring",
        "RerankResponse",
        "RerankRequest",
        {"query": "What is the capital of France?", "documents": ["Paris.", "Berlin."]},
        errors=_GENERATION_ERRORS,
    ),
    "responses": Doc(
        "Response (stored unless `store` is false)",
        "OpenAI",
        "ResponseObject",
        "ResponsesRequest",
        {"input": "Hello!"},
        "server-sent events named by their `type` (response.created, "
        "response.output_text.delta, ..., response.completed), each numbered "
        "by `sequence_number`",
        (400, 401, 404, 409, 413, 500, 503),
    ),
    "get_response": Doc("A stored response", "OpenAI", "ResponseObject", errors=_STORED_ERRORS),
    "delete_response": Doc(
        "Delete a stored response", "OpenAI", "ResponseDeleted", errors=(401, 404, 500, 503)
    ),
    "input_items": Doc(
        "A stored response's input items", "OpenAI", "ResponseItemList", errors=_STORED_ERRORS
    ),
    "cancel_response": Doc(
        "Cancel a background response", "OpenAI", "ResponseObject", errors=_STORED_ERRORS
    ),
    "models": Doc(
        "Served models",
        "OpenAI",
        ("ModelList", "AnthropicModelList"),
        errors=(401, 500),
    ),
    "model": Doc(
        "One served model",
        "OpenAI",
        ("ModelEntry", "AnthropicModel"),
        errors=(401, 404, 500),
    ),
    "messages": Doc(
        "Message",
        "Anthropic",
        "Message",
        "MessagesRequest",
        {"max_tokens": 64, "messages": _HELLO},
        "server-sent events named by their `type` (message_start, "
        "content_block_start, content_block_delta, content_block_stop, "
        "message_delta, message_stop; ping while quiet; error on a failure)",
        _GENERATION_ERRORS,
        anthropic=True,
    ),
    "count_tokens": Doc(
        "Count a message's prompt tokens",
        "Anthropic",
        "TokenCount",
        "CountTokensRequest",
        {"messages": _HELLO},
        errors=_TEXT_ERRORS,
        anthropic=True,
    ),
    "tokenize": Doc(
        "Tokenize text or a chat prompt",
        "Tokens",
        "TokenizeResponse",
        "TokenizeRequest",
        {"prompt": "Hello!"},
        errors=_TEXT_ERRORS,
    ),
    "detokenize": Doc(
        "Token ids to text",
        "Tokens",
        "DetokenizeResponse",
        "DetokenizeRequest",
        {"tokens": [72, 105]},
        errors=_TEXT_ERRORS,
    ),
    "loras": Doc("LoRA adapters loaded", "LoRA", "LoraList", errors=(401, 500)),
    "load_lora": Doc(
        "Load a LoRA adapter (served as a model of its own)",
        "LoRA",
        "Lora",
        "LoadLoraRequest",
        {"lora_name": "sql-adapter", "lora_path": "/adapters/sql"},
        errors=(400, 401, 413, 500, 503),
    ),
    "unload_lora": Doc(
        "Unload a LoRA adapter (its running requests finish)",
        "LoRA",
        "LoraDeleted",
        errors=(400, 401, 404, 500),
    ),
    "vllm_unload_lora": Doc(
        "Unload a LoRA adapter (vLLM's route)",
        "LoRA",
        None,
        "UnloadLoraRequest",
        {"lora_name": "sql-adapter"},
        errors=(400, 401, 404, 413, 500),
    ),
    "health": Doc("Readiness: models and their engines", "Operations", "Health", errors=(503,)),
    "live": Doc("Liveness", "Operations", "Live"),
    "metrics": Doc("Prometheus metrics (text exposition format)", "Operations", None),
}

# vLLM's own load route: the same body as /v1/loras, a plain-text answer
DOCS["vllm_load_lora"] = replace(
    DOCS["load_lora"], summary="Load a LoRA adapter (vLLM's route)", answer=None
)

# Schemas that no route names directly but the stream descriptions do.
_EXTRA = ("ChatCompletionChunk", "CompletionChunk", "OpenAIError", "AnthropicError")


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _answer_schema(answer: str | tuple[str, ...]) -> dict[str, Any]:
    """One model's ref; a route that answers in two APIs' shapes, either."""
    if isinstance(answer, tuple):
        return {"anyOf": [_ref(m) for m in answer]}
    return _ref(answer)


def route(name: str) -> dict[str, Any]:
    """The keyword arguments of route `name`'s decorator (`@app.post(path, **route(name))`)."""
    doc = DOCS[name]
    ok: dict[str, Any] = {"description": "OK"}
    if doc.answer is None:
        ok["content"] = {"text/plain": {"schema": {"type": "string"}}}
    else:
        ok["content"] = {"application/json": {"schema": _answer_schema(doc.answer)}}
    if isinstance(doc.answer, tuple):
        ok["description"] = "OK: OpenAI's shape, or Anthropic's when `anthropic-version` is sent"
    if doc.stream is not None:
        ok["description"] = f'OK: JSON; with `"stream": true`, {doc.stream}'
        ok["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    responses: dict[int | str, Any] = {200: ok}
    envelope = "AnthropicError" if doc.anthropic else "OpenAIError"
    for status in doc.errors:
        if name == "health":
            responses[status] = {
                "description": "starting, or a model has nothing to serve it",
                "content": {"application/json": {"schema": _ref("Health")}},
            }
            continue
        err: dict[str, Any] = {
            "description": _ERRORS[status],
            "content": {"application/json": {"schema": _ref(envelope)}},
        }
        if status == 503:
            err["headers"] = {"Retry-After": {"schema": {"type": "string"}}}
        responses[status] = err
    kwargs: dict[str, Any] = {"summary": doc.summary, "tags": [doc.tag], "responses": responses}
    if doc.answer is None:  # the route's own Response is sent; this only names the media type
        kwargs["response_class"] = PlainTextResponse
    if doc.request is not None:
        body = {"schema": _ref(doc.request), "example": doc.example}
        kwargs["openapi_extra"] = {
            "requestBody": {"required": True, "content": {"application/json": body}}
        }
    return kwargs


def model(name: str) -> type[BaseModel]:
    """The model behind component `name`: a request model (protocol/*) or an
    answer's (api/schemas.py, imported only now: building the document is
    the one thing that needs it)."""
    from rotor.api import schemas

    requests = (
        ChatCompletionRequest,
        CompletionRequest,
        ResponsesRequest,
        MessagesRequest,
        CountTokensRequest,
        EmbeddingRequest,
        ScoreRequest,
        RerankRequest,
        LoadLoraRequest,
        UnloadLoraRequest,
    )
    found = {m.__name__: m for m in requests}.get(name) or getattr(schemas, name)
    assert isinstance(found, type) and issubclass(found, BaseModel), name
    return found


def _names() -> list[str]:
    found: list[str] = []
    for doc in DOCS.values():
        answers = doc.answer if isinstance(doc.answer, tuple) else (doc.answer,)
        for name in (doc.request, *answers, *_EXTRA):
            if name is not None and name not in found:
                found.append(name)
    return found


def component_schemas() -> dict[str, Any]:
    """Every schema the routes refer to, by name, in JSON Schema 2020-12 (OpenAPI 3.1's)."""
    _, top = models_json_schema(
        [(model(name), "validation") for name in _names()], ref_template=REF
    )
    defs: dict[str, Any] = top["$defs"]
    why = {**ignored.COMMON, **ignored.CHAT, **ignored.COMPLETIONS}
    for name in ("ChatCompletionRequest", "CompletionRequest"):
        props = defs[name]["properties"]
        for field, prop in props.items():
            if field in why:
                prop["description"] = f"accepted and ignored: {why[field]}"
        # The fields that do something first (the models declare the ignored ones first).
        order = sorted(props, key=lambda f: f in why)
        defs[name]["properties"] = {f: props[f] for f in order}
    return defs


def document(app: FastAPI, api_key: str | Sequence[str] | None) -> dict[str, Any]:
    """The whole document; with an API key, the guarded routes say which credentials they take."""
    doc = get_openapi(
        title=app.title,
        version=app.version,
        description=(
            "rotor's HTTP API. Request bodies are validated strictly: an unknown "
            "field is a 400 naming it."
        ),
        routes=app.routes,
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    # No route has FastAPI-validated parameters that could fail: rotor answers 400, never 422.
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas.update(component_schemas())
    for path, item in doc.get("paths", {}).items():
        for op in item.values():
            op.get("responses", {}).pop("422", None)
            if api_key is not None and guarded(path):
                op["security"] = [{"bearer": []}, {"x-api-key": []}]
    if api_key is not None:
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"},
            "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key"},
        }
    return doc


def install(app: FastAPI, api_key: str | Sequence[str] | None) -> None:
    """Make `app` serve this document at its openapi_url (built once, on first use)."""
    cached: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if not cached:
            cached.update(document(app, api_key))
        return cached

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override
