"""The token-in/token-out contract between the frontend and every engine.

Plain dataclasses so they cross a process boundary (`rotor.protocol.codec`)
and cost nothing to build in-process. Engines never see text
semantics (no stop strings, no parsing); the frontend never trusts an engine to
stop on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from rotor.protocol.flow import Pulled, Source

Finish = Literal["eos", "length", "stop", "cancelled", "error"]

# What went wrong with an engine request, which decides what the client gets:
# refused     — the request is bad for this engine (400 naming `param`);
# unavailable — the engine cannot serve now: gone, overloaded, shutting down
#               (503 + Retry-After; the only kind a migration may retry);
# internal    — the engine broke (500; the message is logged, never sent).
ErrorKind = Literal["refused", "unavailable", "internal"]

# Why an engine is unavailable, which the router's migration policy and
# /metrics read (never the message text):
# worker_gone   — the worker's process or its lease is gone;
# timeout       — it stopped answering, or sent no output for too long;
# shutting_down — it is draining and takes no new requests;
# no_worker     — no live worker serves the model (or, disaggregated, no
#                 prefill worker when it must be used);
# kv_transfer   — a decode engine could not fetch a prefill's KV blocks;
# unhealthy     — its worker's engine failed a canary (alive, but wedged: no
#                 step and no answer), so the worker ended its requests;
# overloaded    — every live worker is past the frontend's overload limits
#                 (--max-kv-usage, --max-prefill-tokens): 503 or 529;
# unavailable   — any other reason (an engine not started, or dead).
# A peer that predates a cause reads it as "unavailable" (protocol/codec.py),
# which migrates as well.
Cause = Literal[
    "worker_gone",
    "timeout",
    "shutting_down",
    "no_worker",
    "kv_transfer",
    "unhealthy",
    "overloaded",
    "unavailable",
]
CAUSES = frozenset(get_args(Cause))


class EngineError(Exception):
    """An engine request that failed, with the kind that says what the client gets.

    `param` names the request field at fault as the API spells it ("mock", "n",
    "max_tokens", "prompt") for a refusal, or is None when no field is.
    `cause` says why an "unavailable" engine is (None for the other kinds)."""

    def __init__(
        self,
        message: str,
        kind: ErrorKind = "refused",
        param: str | None = None,
        cause: Cause | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind: ErrorKind = kind
        self.param = param
        self.cause: Cause | None = cause or ("unavailable" if kind == "unavailable" else None)

    def __reduce__(self) -> tuple[Any, ...]:
        return (EngineError, (self.message, self.kind, self.param, self.cause))


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    # A decoding constraint: {"type": "json_schema" | "regex" | "choice" |
    # "structural_tag" | "grammar" | "client_structural_tag", ..., and
    # optionally "options": vLLM's whitespace_pattern / disable_*}. None =
    # unconstrained. (A map on the wire, so new kinds keep old messages readable.)
    guided: dict[str, Any] | None = None
    # OpenAI's logit_bias: token id -> bias added to its logit (-100 bans it,
    # +100 all but forces it). None = no bias.
    logit_bias: dict[int, float] | None = None


@dataclass(slots=True)
class StopParams:
    max_tokens: int = 16
    min_tokens: int = 0
    stop_token_ids: list[int] = field(default_factory=list)  # the user's
    eos_token_ids: list[int] = field(default_factory=list)  # the model's
    visible_stop_token_ids: list[int] = field(default_factory=list)  # set by preprocess
    ignore_eos: bool = False


@dataclass(slots=True)
class OutputParams:
    logprobs: bool = False
    top_logprobs: int = 0
    skip_special_tokens: bool = True
    # The prompt's logprobs, with this many top alternatives per prompt token
    # (vLLM's `prompt_logprobs`); None: not asked. The request's first output
    # carries them (`EngineOutput.prompt_logprobs`), once.
    prompt_logprobs: int | None = None


# The annotation of a request resumed on another worker (router/migration.py):
# how many tokens its output already has. Engines that play scripted output
# (echo, the mocker's `mock`) continue from there.
RESUME_FROM = "resume_from"

# Disaggregated serving (router/disagg.py decides, the engines act; see
# docs/disaggregation.md). PREFILL_ONLY (True): compute the prompt, sample the
# first token, and keep the prompt's KV blocks for a decode worker: one output,
# that token with finish "length", whose `kv_transfer` says how to fetch them.
# KV_TRANSFER: a prefill's `kv_transfer`, with "worker" (the prefill worker's
# id) added by the router: fetch the blocks this engine lacks before computing
# the prompt (a failed fetch: compute them, unless "enforce" is true).
PREFILL_ONLY = "prefill_only"
KV_TRANSFER = "kv_transfer"


@dataclass(slots=True)
class EngineImage:
    """An image of the prompt: its tokens are `token_ids[offset : offset + length]`
    (the placeholder expanded as the model's processor expands it, so the
    prompt's length, its KV blocks and their hashes are the engine's), and an
    engine that expands placeholders itself (vLLM) is sent `placeholder` once in
    the span's place (`collapsed_ids`).

    `content_hash` is the image's identity (SHA-256 of its bytes, hex:
    media/decode.content_hash): it salts the hash of every KV block that holds
    its tokens (protocol/kv.block_hashes) and is vLLM's `multi_modal_uuids`.
    `data` is the image's bytes as the client sent them (PNG, JPEG, ...), never
    decoded pixels; None where they are not needed (a decode worker that
    fetches the prompt's KV) or travel beside the request (a worker fetches
    them by `content_hash`, runtime/nats/media.py)."""

    content_hash: str
    offset: int
    length: int
    placeholder: int
    data: bytes | None = None


def collapsed_ids(token_ids: list[int], images: list[EngineImage]) -> list[int]:
    """The prompt with each image's span replaced by its one placeholder token
    (what vLLM expands itself); `images` in prompt order."""
    if not images:
        return token_ids
    out: list[int] = []
    at = 0
    for image in images:
        out.extend(token_ids[at : image.offset])
        out.append(image.placeholder)
        at = image.offset + image.length
    out.extend(token_ids[at:])
    return out


@dataclass(slots=True)
class EngineRequest:
    request_id: str
    model: str
    token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: StopParams = field(default_factory=StopParams)
    output: OutputParams = field(default_factory=OutputParams)
    n: int = 1
    # Engine-specific extras: "echo_text" for the text-out echo engine,
    # "mock" for the mocker's scripted output, RESUME_FROM for either.
    annotations: dict[str, Any] = field(default_factory=dict)
    # The conversation it belongs to, which a frontend's pool keeps on one
    # worker (router/sessions.py); engines need not read it.
    session_id: str | None = None
    # The LoRA adapter to generate with (its name, as loaded on the engine);
    # None: the base model. It salts the KV block hashes (protocol/kv.py).
    lora: str | None = None
    # The tenant's prefix-cache salt (the request's `cache_salt`): requests
    # with different salts share no cached prefix, in the engine or in the
    # router's KV block hashes (protocol/kv.chain_root). None: no salt.
    cache_salt: str | None = None
    # vLLM's meaning: lower is scheduled earlier, ties by arrival; only an
    # engine whose card says `priority_scheduling` is sent a nonzero one.
    priority: int = 0
    # The prompt's images, in prompt order, their spans apart (EngineImage);
    # only an engine whose card says `images` is sent any.
    images: list[EngineImage] = field(default_factory=list)


@dataclass(slots=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass(slots=True)
class PromptLogprob:
    """A prompt token's logprob given the tokens before it: its rank in the
    vocabulary (1: the likeliest) and the likeliest alternatives, best
    first, as (token id, logprob) pairs (their ranks are 1, 2, ...)."""

    token_id: int
    logprob: float
    rank: int
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass(slots=True)
class EngineOutput:
    """One item of an engine's stream, for one choice."""

    index: int = 0
    token_ids: list[int] = field(default_factory=list)
    text: str | None = None  # text-out engines (echo) send text; one output = one token
    logprobs: list[TokenLogprob] | None = None
    finish: Finish | None = None
    matched: int | str | None = None  # the EOS/stop id (or string) that ended it
    cached_tokens: int | None = None
    error: str | None = None
    # A PREFILL_ONLY request's last output: what a decode worker needs to
    # fetch the prompt's KV blocks (engine-specific, plain msgpack values).
    kv_transfer: dict[str, Any] | None = None
    # `OutputParams.prompt_logprobs` asked: on the request's first output, one
    # entry per prompt token after the first (the first has no context)
    prompt_logprobs: list[PromptLogprob] | None = None


@dataclass(slots=True)
class EngineState:
    """What an engine reports about itself, for /health, /metrics and (later) the
    router's load view. Each field is a `rotor_engine_*` gauge or counter
    (api/metrics.py names them); an engine fills what it knows and leaves the
    rest at 0."""

    active_requests: int = 0  # requests it holds now
    waiting: int = 0  # sequences queued for their first step
    running: int = 0  # sequences being stepped
    tokens_generated: int = 0
    kv_blocks_total: int = 0
    kv_blocks_free: int = 0
    kv_blocks_cached: int = 0
    pending_prefill_tokens: int = 0  # prompt tokens admitted or queued, not yet computed
    preemptions: int = 0
    steps: int = 0  # engine steps done (a worker's canary reads it: one that moves works)
    simulated_ms: float = 0.0
    # disaggregated serving: blocks held for a decode worker, holds that ran
    # out before the fetch, blocks fetched from a prefill worker, and
    # fetches that failed (the prompt was then computed here)
    kv_blocks_pinned: int = 0
    kv_hold_timeouts: int = 0
    kv_blocks_fetched: int = 0
    kv_fetch_failures: int = 0
    max_batched_tokens: int = 0  # the engine's token budget of one step (0: not said)
    # KV blocks below the device (protocol/kv.Medium): held now in host memory
    # and on disk, and how many were ever brought back up to the device from each
    kv_host_blocks: int = 0
    kv_disk_blocks: int = 0
    kv_host_blocks_loaded: int = 0
    kv_disk_blocks_loaded: int = 0


def absorb(into: EngineOutput, item: EngineOutput) -> None:
    """`into` (an earlier output of the same choice) takes `item`'s tokens,
    logprobs and finish, as if the engine had sent them together."""
    into.token_ids.extend(item.token_ids)
    if into.logprobs is not None and item.logprobs is not None:
        into.logprobs.extend(item.logprobs)
    into.finish, into.matched, into.error = item.finish, item.matched, item.error
    if into.cached_tokens is None:
        into.cached_tokens = item.cached_tokens


def merge_outputs(items: list[EngineOutput]) -> list[EngineOutput]:
    """What piled up for a reader that fell behind, as few outputs as it
    can be: each choice's token outputs as one (in the place of its first,
    with all their tokens and logprobs and the last one's finish); choices
    may interleave. Text outputs (one token each) stay apart, and so do
    outputs with and without logprobs. A burst costs the pipeline one step."""
    if len(items) == 1:
        return items
    merged: list[EngineOutput] = []
    taking: dict[int, EngineOutput] = {}  # per choice: the output still taking tokens
    for item in items:
        into = taking.get(item.index)
        if (
            into is not None
            and item.text is None
            and (into.logprobs is None) == (item.logprobs is None)
        ):
            absorb(into, item)
        else:
            merged.append(item)
            into = item
        if into.finish is None and into.text is None and into.error is None:
            taking[item.index] = into
        else:
            taking.pop(item.index, None)
    return merged


def tokens_of(output: EngineOutput) -> int:
    """How many tokens an output carries (a text output is one)."""
    return len(output.token_ids) or int(output.text is not None)


# -- the engine's side of the per-token path ------------------------------------


EngineStream = Source[EngineOutput]


class EngineClient(Protocol):
    """What the frontend calls a model's engine through: an engine in this
    process (engines/base.Engine), the engine process over a socket, or a
    pool of remote workers."""

    def generate(self, request: EngineRequest) -> EngineStream:
        """The request's outputs, each tagged with its choice's `index`: the
        first `subscribe` starts the request, `stop` aborts it at once. A
        request the engine refuses ends, before any output, with an
        EngineError ("refused", naming the field)."""
        ...

    def state(self) -> EngineState:
        """What the engine reports about itself, for /health and /metrics."""
        ...


def pulled(stream: EngineStream) -> Pulled[EngineOutput]:
    """An engine stream read as an async iterator: what piled up while the
    reader was away comes as one output per choice, and a reader more than
    PULLED_WINDOW tokens behind holds the engine."""
    return Pulled(stream, merge_outputs, tokens_of)
