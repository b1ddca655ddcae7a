"""The frontend: the registry of served models, each behind an engine client,
and one request from a validated body to its stream of internal events.
HTTP (api/) and the terminal inputs (inputs/) drive requests through here,
so they behave the same; each shapes the events in its own way.

A request's model is looked up once (`Frontend.model`), by whoever takes the
request, and the entry is what every later step is given.

Request ids: the id a caller passes (the client's `x-request-id`, or one made
for it) names the response (`chatcmpl-<id>`) and the logs; the engine never
sees it. Every engine request gets an id of its own, unique in this process,
so two clients that send the same header cannot collide in the engine.

Status before stream: a response is handed back only once its first engine
event (or error) has arrived, so a refusal from a remote engine is still a
4xx naming the field, and an engine that is down is a 503, never a broken
stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rotor import tracing
from rotor.media.limits import MediaLimits
from rotor.pipeline.bounds import text_size
from rotor.pipeline.embed import prepare_embedding
from rotor.pipeline.errors import RequestError
from rotor.pipeline.events import ChoiceEvent, Failure, ResponseFailed, Usage
from rotor.pipeline.generate import run_all
from rotor.pipeline.images import ImageLoader
from rotor.pipeline.preparer import Preparer
from rotor.pipeline.preprocess import (
    LONG_PROMPT_CHARS,
    Prepared,
    new_request_id,
    prepare_chat,
    prepare_completion,
)
from rotor.pipeline.score import BiInputs, Sides, cosine, prepare_scores
from rotor.pipeline.served import ServedModel
from rotor.protocol.embeddings import EmbeddingRequest
from rotor.protocol.engine import EngineClient, EngineError
from rotor.protocol.flow import Pulled
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest
from rotor.protocol.routing import KVCounts, PoolCounts, Routed
from rotor.protocol.scores import ScorePair
from rotor.tracing import Span
from rotor.tracing.generate import traced

log = logging.getLogger("rotor.frontend")


class ModelNotFound(LookupError):
    pass


@runtime_checkable
class EmbeddingEngine(Protocol):
    """An engine client that embeds (engines/base.Embedder's contract, as the
    registry sees it: an engine in process, or a pool of remote workers)."""

    async def embed(self, inputs: list[list[int]], dimensions: int | None) -> list[list[float]]: ...


@runtime_checkable
class ScoringEngine(Protocol):
    """An engine client that scores pairs (engines/base.Scorer's contract, as
    the registry sees it)."""

    async def score(self, pairs: list[ScorePair]) -> list[float]: ...


@runtime_checkable
class AdapterEngine(Protocol):
    """An engine client whose requests may name a LoRA adapter (engines/base.
    AdapterSource as the registry sees it): each adapter is served as a model."""

    def adapters(self) -> dict[str, str]:
        """Each adapter's name and the directory it was loaded from."""
        ...


@runtime_checkable
class RemoteEngine(Protocol):
    """An engine client over remote workers (a router's pool): which workers
    are live, where a request was routed, and what it counted (/metrics)."""

    def describe(self) -> list[dict[str, Any]]:
        """The live workers, for /health (none: the model cannot be served now)."""
        ...

    def routed(self, request_id: str) -> Routed | None:
        """Where a running request was routed (None: it is not running)."""
        ...

    def pools(self) -> dict[str, list[str]]:
        """The live workers by what they do ("decode": agg and decode
        workers, "prefill": prefill workers)."""
        ...

    def unhealthy(self) -> list[str]:
        """The serving workers that are not live: their engine failed its canary."""
        ...

    @property
    def stats(self) -> PoolCounts:
        """What it counted: routing decisions, migrations, refusals, prefills."""
        ...

    def kv_stats(self) -> KVCounts | None:
        """What its KV routing counted (None: it does not route by KV)."""
        ...


@dataclass
class ModelEntry:
    model: ServedModel
    engine: EngineClient
    # The name a request finds it by: the model's own, or one of its aliases
    # (`--served-model-name`); responses say it back.
    name: str = ""
    # A LoRA adapter's entry: the directory it was loaded from (its name is
    # the entry's); None: the model itself.
    lora_path: str | None = None
    # The engine when it is a pool of remote workers; None for an in-process
    # engine, which is always there.
    remote: RemoteEngine | None = field(init=False)

    def __post_init__(self) -> None:
        self.remote = self.engine if isinstance(self.engine, RemoteEngine) else None
        self.name = self.name or self.model.name

    @property
    def lora(self) -> str | None:
        """The LoRA adapter its requests generate with (None: the model)."""
        return self.name if self.lora_path is not None else None

    def live(self) -> bool:
        """Something can serve it now (a model whose last worker left stays
        known, and its requests are 503s; so does an adapter whose last
        holder left)."""
        return self.remote is None or bool(self.remote.describe())

    def routed(self, request_id: str) -> Routed | None:
        return self.remote.routed(request_id) if self.remote is not None else None


class ModelRegistry:
    """The models this frontend serves, by name, each with its engine client
    (an in-process engine, or a pool of remote workers). A model's aliases
    find the same model and engine."""

    def __init__(self) -> None:
        self._entries: dict[str, ModelEntry] = {}  # every name, aliases too

    def add(self, model: ServedModel, engine: EngineClient) -> None:
        self._entries[model.name] = ModelEntry(model, engine)
        for alias in model.card.names()[1:]:
            taken = self._entries.get(alias)
            if taken is not None and taken.model.name != model.name:
                log.warning("%r names a model of its own: not an alias of %r", alias, model.name)
                continue
            self._entries[alias] = ModelEntry(model, engine, alias)

    def remove(self, name: str) -> None:
        entry = self._entries.get(name)
        if entry is None:
            return
        for other in entry.model.card.names():
            if (found := self._entries.get(other)) is not None and found.model is entry.model:
                del self._entries[other]

    def names(self) -> list[str]:
        """Every name a request may use, aliases included."""
        return list(self._entries)

    def entries(self) -> list[ModelEntry]:
        """One entry per model, under its canonical name (metrics, /health)."""
        return [e for name, e in self._entries.items() if name == e.model.name]

    def listed(self) -> list[ModelEntry]:
        """One entry per name, aliases and LoRA adapters included (`/v1/models`)."""
        out = list(self._entries.values())
        for entry in self.entries():
            engine = entry.engine
            if isinstance(engine, AdapterEngine):
                out.extend(_adapter_entry(entry, n, p) for n, p in engine.adapters().items())
        return out

    def adapter(self, name: str) -> ModelEntry | None:
        """The entry of the LoRA adapter `name` (a model's engine holds it)."""
        for entry in self.entries():
            engine = entry.engine
            if isinstance(engine, AdapterEngine) and (path := engine.adapters().get(name)):
                return _adapter_entry(entry, name, path)
        return None

    def get(self, name: str | None) -> ModelEntry:
        """The entry for a request's `model`; None or "" means the only one."""
        if name:
            entry = self._entries.get(name) or self.adapter(name)
            if entry is not None:
                return entry
        elif len(models := self.entries()) == 1:
            return models[0]
        served = ", ".join(e.name for e in self.listed()) or "none"
        if not name:
            raise ModelNotFound(f"the request names no model; served: {served}")
        raise ModelNotFound(f"the model {name!r} does not exist; served: {served}")


def _adapter_entry(base: ModelEntry, name: str, path: str) -> ModelEntry:
    return ModelEntry(base.model, base.engine, name, lora_path=path)


@dataclass
class StartedResponse:
    """A started response: its id, the model serving it, its usage (complete
    once the events end), and the internal event stream. `token_text` names a
    token for logprobs (the prompt's too)."""

    id: str
    served: ServedModel
    # the name the request used (an alias, or the canonical name)
    name: str
    created: int
    n: int
    usage: Usage
    # its events: the first one has come (and is not read yet); pull them
    # (`async for`), or subscribe a sink to have them pushed
    events: Pulled[ChoiceEvent]
    headers: dict[str, str] = field(default_factory=dict)  # where it was routed
    # where it was routed and moved, read by the request log at the end
    routed: Routed | None = None
    token_text: Callable[[int], str] | None = None
    token_bytes: Callable[[int], bytes] | None = None  # a token's real bytes, for logprobs
    # its prompts and their choices (finish reasons), read once at the end by the request log
    prepared: list[Prepared] = field(default_factory=list)

    def prompt_token_ids(self, index: int) -> list[int]:
        """The token ids the engine took as the prompt of choice `index`
        (`return_token_ids`)."""
        for p in self.prepared:
            if index < p.first_index + len(p.requests):
                return p.token_ids
        raise IndexError(index)

    @property
    def model(self) -> str:
        """The model's name as the request gave it, as responses say it
        (metrics count the model under its canonical name, `served.name`)."""
        return self.name


@dataclass(frozen=True)
class Embedded:
    vectors: list[list[float]]  # one per input, in order
    prompt_tokens: int


@dataclass(frozen=True)
class Scored:
    scores: list[float]  # one per text of the request's second side, in order
    prompt_tokens: int


@dataclass
class Frontend:
    registry: ModelRegistry = field(default_factory=ModelRegistry)
    reasoning_field: str = "reasoning_content"
    ready: bool = False  # the engines it was built with have started
    # Where prompts are rendered and tokenized, within a time budget.
    preparer: Preparer = field(default_factory=Preparer)
    # Where a request's images are fetched and decoded (under --max-media-bytes, ...).
    images: ImageLoader = field(default_factory=lambda: ImageLoader.build(MediaLimits()))

    def model(self, name: str | None) -> ModelEntry:
        """The served model a request names (ModelNotFound when there is none)."""
        return self.registry.get(name)

    def live_model(self, name: str) -> ModelEntry:
        """The model `name` when something can serve it now (`/v1/models/NAME`,
        KServe's model metadata); ModelNotFound otherwise."""
        try:
            entry = self.registry.get(name) if name else None
        except ModelNotFound:
            entry = None
        if entry is None or not entry.live():
            raise ModelNotFound(f"the model {name!r} does not exist")
        return entry

    async def prepare_chat(self, model: ServedModel, req: ChatCompletionRequest) -> Prepared:
        """The chat request prepared as `chat` runs it (prompt, tokens, choices),
        by the preparer: a chat template is untrusted code. A short
        conversation is tried on the loop first, under a CPU alarm (the thread
        hop each way cost more than the work). Its images are loaded first,
        all at once, off the loop. Raises RequestError."""
        images = await self.images.load(model, req.messages)
        # A `mock` script is checked here too (its tool calls, under a constraint).
        work = (req.messages, req.tools, req.mock)
        short = not images and text_size(work, LONG_PROMPT_CHARS) <= LONG_PROMPT_CHARS
        return await self.preparer.run(
            prepare_chat,
            model,
            req,
            new_request_id(),
            images,
            inline=model.name if short else None,
        )

    async def chat(
        self, entry: ModelEntry, req: ChatCompletionRequest, request_id: str
    ) -> StartedResponse:
        """Start a chat response named after `request_id` (the caller's id)."""
        with tracing.start("rotor.prepare") as span:  # template + tokenization
            prepared = await self.prepare_chat(entry.model, req)
            _note_prepared(span, [prepared])
        named = req.logprobs or req.prompt_logprobs_wanted() is not None
        return await self._start(entry, f"chatcmpl-{request_id}", [prepared], named)

    async def completion(
        self, entry: ModelEntry, req: CompletionRequest, request_id: str
    ) -> StartedResponse:
        """Start a completions response named after `request_id` (the caller's id)."""
        engine_id = new_request_id()
        with tracing.start("rotor.prepare") as span:  # tokenization
            if _completion_chars(req) > LONG_PROMPT_CHARS:
                prepared = await self.preparer.run(prepare_completion, entry.model, req, engine_id)
            else:
                prepared = prepare_completion(entry.model, req, engine_id)
            _note_prepared(span, prepared)
        named = req.logprobs is not None or req.prompt_logprobs_wanted() is not None
        return await self._start(entry, f"cmpl-{request_id}", prepared, named)

    async def embed(self, entry: ModelEntry, req: EmbeddingRequest) -> Embedded:
        """Each input's vector (`/v1/embeddings`); RequestError for what the
        model cannot do, ResponseFailed when its engine fails."""
        engine = entry.engine
        if not isinstance(engine, EmbeddingEngine):
            raise RequestError(f"the model {entry.name!r} cannot embed", "model")
        if text_size(req.input, LONG_PROMPT_CHARS) > LONG_PROMPT_CHARS:
            inputs = await self.preparer.run(prepare_embedding, entry.model, req)
        else:
            inputs = prepare_embedding(entry.model, req)
        try:
            vectors = await engine.embed(inputs.token_ids, inputs.dimensions)
        except EngineError as e:
            raise ResponseFailed(Failure.from_engine(e)) from None
        return Embedded(vectors, inputs.prompt_tokens)

    async def score(self, entry: ModelEntry, route: str, sides: Sides) -> Scored:
        """Each pair's score (`/v1/score`, `/v1/rerank`): a cross-encoder's, or
        the cosine of an embedding model's two vectors; RequestError for what
        the model cannot do, ResponseFailed when its engine fails."""
        engine = entry.engine
        if text_size((sides.first, sides.second), LONG_PROMPT_CHARS) > LONG_PROMPT_CHARS:
            inputs = await self.preparer.run(prepare_scores, entry.model, route, sides)
        else:
            inputs = prepare_scores(entry.model, route, sides)
        try:
            if isinstance(inputs, BiInputs):
                if not isinstance(engine, EmbeddingEngine):
                    raise RequestError(f"the model {entry.name!r} cannot embed", "model")
                vectors = await engine.embed(inputs.token_ids, None)
                scores = [cosine(vectors[a], vectors[b]) for a, b in inputs.pairs()]
            else:
                if not isinstance(engine, ScoringEngine):
                    raise RequestError(f"the model {entry.name!r} cannot score pairs", "model")
                scores = await engine.score(inputs.pairs)
        except EngineError as e:
            raise ResponseFailed(Failure.from_engine(e)) from None
        return Scored(scores, inputs.prompt_tokens)

    async def _start(
        self, entry: ModelEntry, response_id: str, prepared: list[Prepared], logprobs: bool
    ) -> StartedResponse:
        model = entry.model
        if entry.lora is not None:
            for p in prepared:
                for r in p.requests:
                    r.lora = entry.lora
        log.debug(
            "response %s runs as engine request(s) %s",
            response_id,
            ", ".join(r.request_id for p in prepared for r in p.requests),
        )
        usage = Usage(
            sum(p.prompt_tokens for p in prepared),
            [c.decoder for p in prepared for c in p.choices],
        )
        # tracing on, an in-process engine's requests are generate spans (a pool's: its workers')
        engine = entry.engine if entry.remote is not None else traced(entry.engine)
        events = Pulled(run_all(engine, prepared, usage))
        events.open()  # the engine requests go: where to is known now, and kept till the end
        routed = entry.routed(prepared[0].requests[0].request_id)
        error = await events.ready()  # (cancelled: the engines' work stops with it)
        if error is not None and not _part_of_the_stream(error):
            await events.aclose()
            raise error
        tokenizer = model.tokenizer if logprobs else None
        token_text = model.token_text if tokenizer is not None else None
        return StartedResponse(
            id=response_id,
            served=model,
            name=entry.name,
            created=int(time.time()),
            n=usage.choices,
            usage=usage,
            events=events,
            headers=dict(routed.headers) if routed is not None else {},
            routed=routed,
            token_text=token_text,
            token_bytes=tokenizer.token_bytes if tokenizer is not None else None,
            prepared=prepared,
        )


def _part_of_the_stream(error: Exception) -> bool:
    """An error before the first event that the stream still tells, as its
    first and last event: output that broke its constraint (the model's
    output is the answer). Anything else is the response's status."""
    return isinstance(error, ResponseFailed) and error.failure.kind == "malformed"


def _note_prepared(span: Span, prepared: list[Prepared]) -> None:
    """What preparing came to: the prompt tokens, the engine requests (one per choice)."""
    if span.recording:
        span.set(
            {
                "gen_ai.usage.input_tokens": sum(p.prompt_tokens for p in prepared),
                "rotor.engine_requests": sum(len(p.requests) for p in prepared),
            }
        )


def _completion_chars(req: CompletionRequest) -> int:
    """The size of all of a completion's prompts (text, or token ids)."""
    return sum(len(p) for p in req.prompts())
