"""The frontend: served models, their engines, and one request from validated
body to a stream of API chunks. HTTP (api/) and the terminal inputs (inputs/)
both drive requests through here, so they behave the same.

Request ids: the id a caller passes (the client's `x-request-id`, or one made
for it) names the response (`chatcmpl-<id>`) and the logs; the engine never
sees it. Every engine request gets an id of its own, unique in this process,
so two clients that send the same header cannot collide in the engine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from rotor.engines.base import Engine, EngineError
from rotor.pipeline.generate import Usage, run_all
from rotor.pipeline.preprocess import (
    LONG_PROMPT_CHARS,
    Prepared,
    RequestError,
    ServedModel,
    new_request_id,
    prepare_chat,
    prepare_completion,
)
from rotor.pipeline.stream import ChatChunker, CompletionChunker
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest

log = logging.getLogger("rotor.frontend")


class ModelNotFound(LookupError):
    pass


@dataclass
class Response:
    """A prepared response: its id, its choices' usage, and the chunk stream.

    `on_pieces`, when set, is called each time an engine event brings
    generated pieces, just before their chunks are yielded: the moment a token
    reached the frontend, which is what TTFT and inter-token latency measure
    (the opening `role` chunk and the finish/usage chunks carry no token)."""

    id: str
    model: str
    created: int
    n: int
    usage: Usage
    prepared: list[Prepared]
    chunks: AsyncIterator[dict[str, Any]] = field(init=False)
    on_pieces: Callable[[], None] | None = None


@dataclass
class Frontend:
    engine: Engine
    model: ServedModel
    reasoning_field: str = "reasoning_content"
    started: bool = False

    @property
    def model_names(self) -> list[str]:
        return [self.model.card.name]

    def resolve(self, name: str | None) -> ServedModel:
        """The served model for a request's `model` (None/empty: the only one)."""
        if not name or name == self.model.card.name:
            return self.model
        raise ModelNotFound(
            f"the model {name!r} does not exist; served: {', '.join(self.model_names)}"
        )

    async def start(self) -> None:
        await self.engine.start()
        self.started = True

    async def stop(self) -> None:
        self.started = False
        await self.engine.stop()

    # -- requests --------------------------------------------------------------------

    async def prepare_chat(self, req: ChatCompletionRequest) -> Prepared:
        """The chat request prepared as `chat` runs it (prompt, tokens, choices),
        off the event loop when the messages are long. Its engine request has an
        id of its own. Raises ModelNotFound, RequestError."""
        model = self.resolve(req.model)
        request_id = new_request_id()
        if _chat_chars(req) > LONG_PROMPT_CHARS:
            return await asyncio.to_thread(prepare_chat, model, req, request_id)
        return prepare_chat(model, req, request_id)

    async def chat(self, req: ChatCompletionRequest, request_id: str) -> Response:
        """Start a chat response named after `request_id` (the caller's id)."""
        model = self.resolve(req.model)
        prepared = await self.prepare_chat(req)
        self._validate_engine([prepared])
        log.debug("request %s runs as engine request %s", request_id, prepared.request.request_id)
        response_id = f"chatcmpl-{request_id}"
        created = int(time.time())
        usage = Usage()
        chunker = ChatChunker(
            response_id,
            model.card.name,
            created,
            usage,
            prepared.choices,
            reasoning_field=self.reasoning_field,
            continuous_usage=bool(req.stream_options and req.stream_options.continuous_usage_stats),
            token_text=_token_text(model.tokenizer) if req.logprobs else None,
        )
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        resp = Response(response_id, model.card.name, created, req.n, usage, [prepared])
        resp.chunks = self._chunks(resp, chunker, include_usage, chunker.start(range(req.n)))
        return resp

    async def completion(self, req: CompletionRequest, request_id: str) -> Response:
        """Start a completions response named after `request_id` (the caller's id)."""
        model = self.resolve(req.model)
        engine_id = new_request_id()
        if _completion_chars(req) > LONG_PROMPT_CHARS:
            prepared = await asyncio.to_thread(prepare_completion, model, req, engine_id)
        else:
            prepared = prepare_completion(model, req, engine_id)
        self._validate_engine(prepared)
        log.debug("request %s runs as engine request %s", request_id, engine_id)
        response_id = f"cmpl-{request_id}"
        created = int(time.time())
        usage = Usage()
        choices = [c for p in prepared for c in p.choices]
        chunker = CompletionChunker(
            response_id,
            model.card.name,
            created,
            usage,
            choices,
            continuous_usage=bool(req.stream_options and req.stream_options.continuous_usage_stats),
            token_text=_token_text(model.tokenizer) if req.logprobs is not None else None,
        )
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        resp = Response(response_id, model.card.name, created, len(choices), usage, prepared)
        resp.chunks = self._chunks(resp, chunker, include_usage)
        return resp

    def _validate_engine(self, prepared: list[Prepared]) -> None:
        """The engine's own refusals (a bad `mock` script, ...) as 400s, before any work."""
        for p in prepared:
            try:
                self.engine.validate(p.request)
            except EngineError as e:
                raise RequestError(str(e), e.param or "mock") from None

    async def _chunks(
        self,
        resp: Response,
        chunker: ChatChunker | CompletionChunker,
        include_usage: bool,
        opening: list[dict[str, Any]] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        for chunk in opening or ():
            yield chunk
        events = run_all(self.engine, resp.prepared, resp.usage)
        try:
            async for index, choice, pieces in events:
                if pieces and resp.on_pieces is not None:
                    resp.on_pieces()
                for chunk in chunker.events(index, choice, pieces):
                    yield chunk
        finally:
            await events.aclose()
        if include_usage:
            yield chunker.usage_chunk()


def _chat_chars(req: ChatCompletionRequest) -> int:
    """The size of a chat prompt's text, to decide whether to prepare it off the loop."""
    return sum(len(str(m.get("content") or "")) for m in req.messages)


def _completion_chars(req: CompletionRequest) -> int:
    """The size of all of a completion's prompts (text, or token ids)."""
    return sum(len(p) for p in req.prompts())


def _token_text(tok: Any) -> Any:
    if tok is None:
        return None
    return lambda tid: tok.decode([tid], skip_special_tokens=False)
