"""The frontend: served models, their engines, and one request from validated
body to a stream of API chunks. HTTP (api/) and the terminal inputs (inputs/)
both drive requests through here, so they behave the same.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from rotor.engines.base import Engine, EngineError
from rotor.pipeline.generate import Usage, run_all
from rotor.pipeline.preprocess import (
    LONG_PROMPT_CHARS,
    Prepared,
    RequestError,
    ServedModel,
    prepare_chat,
    prepare_completion,
)
from rotor.pipeline.stream import ChatChunker, CompletionChunker
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest


class ModelNotFound(LookupError):
    pass


@dataclass
class Response:
    """A prepared response: its id, its choices' usage, and the chunk stream."""

    id: str
    model: str
    created: int
    n: int
    usage: Usage
    prepared: list[Prepared]
    chunks: AsyncIterator[dict[str, Any]]
    prompt_text: str | None = None


@dataclass
class Frontend:
    engine: Engine
    model: ServedModel
    reasoning_field: str = "reasoning_content"
    started: bool = False
    _aliases: set[str] = field(default_factory=set)

    @property
    def model_names(self) -> list[str]:
        return [self.model.card.name]

    def resolve(self, name: str | None) -> ServedModel:
        """The served model for a request's `model` (None/empty: the only one)."""
        if not name or name == self.model.card.name or name in self._aliases:
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

    def _validate_engine(self, prepared: list[Prepared]) -> None:
        validate = getattr(self.engine, "validate", None)
        if validate is None:
            return
        for p in prepared:
            try:
                validate(p.request)
            except EngineError as e:
                raise RequestError(str(e), "mock") from None

    async def chat(self, req: ChatCompletionRequest, request_id: str) -> Response:
        model = self.resolve(req.model)
        long_prompt = (
            sum(len(str(m.get("content") or "")) for m in req.messages) > LONG_PROMPT_CHARS
        )
        if long_prompt:
            prepared = await asyncio.to_thread(prepare_chat, model, req, request_id)
        else:
            prepared = prepare_chat(model, req, request_id)
        self._validate_engine([prepared])
        usage = Usage()
        tok = model.tokenizer
        chunker = ChatChunker(
            f"chatcmpl-{request_id}",
            model.card.name,
            int(time.time()),
            usage,
            prepared.choices,
            reasoning_field=self.reasoning_field,
            continuous_usage=bool(req.stream_options and req.stream_options.continuous_usage_stats),
            token_text=_token_text(tok) if req.logprobs else None,
        )
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        opening = chunker.start(range(req.n))
        return Response(
            f"chatcmpl-{request_id}",
            model.card.name,
            int(time.time()),
            req.n,
            usage,
            [prepared],
            self._chunks([prepared], usage, chunker, include_usage, opening),
            prepared.prompt_text,
        )

    async def completion(self, req: CompletionRequest, request_id: str) -> Response:
        model = self.resolve(req.model)
        if isinstance(req.prompt, str) and len(req.prompt) > LONG_PROMPT_CHARS:
            prepared = await asyncio.to_thread(prepare_completion, model, req, request_id)
        else:
            prepared = prepare_completion(model, req, request_id)
        self._validate_engine(prepared)
        usage = Usage()
        choices = [c for p in prepared for c in p.choices]
        chunker = CompletionChunker(
            f"cmpl-{request_id}",
            model.card.name,
            int(time.time()),
            usage,
            choices,
            continuous_usage=bool(req.stream_options and req.stream_options.continuous_usage_stats),
            token_text=_token_text(model.tokenizer) if req.logprobs is not None else None,
        )
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return Response(
            f"cmpl-{request_id}",
            model.card.name,
            int(time.time()),
            len(choices),
            usage,
            prepared,
            self._chunks(prepared, usage, chunker, include_usage),
        )

    async def _chunks(
        self,
        prepared: list[Prepared],
        usage: Usage,
        chunker: ChatChunker | CompletionChunker,
        include_usage: bool,
        opening: list[dict[str, Any]] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        for chunk in opening or ():
            yield chunk
        events = run_all(self.engine, prepared, usage)
        try:
            async for index, choice, pieces in events:
                for chunk in chunker.events(index, choice, pieces):
                    yield chunk
        finally:
            await events.aclose()
        if include_usage:
            yield chunker.usage_chunk()


def _token_text(tok: Any) -> Any:
    if tok is None:
        return None
    return lambda tid: tok.decode([tid], skip_special_tokens=False)
