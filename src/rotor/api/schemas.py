"""What rotor answers, as models for the OpenAPI document only.

The shapers (api/openai/, api/anthropic/, api/responses/) build every answer
from an allow-list of fields and never go through these models; the tests
check real answers against the schemas made from them, so the document says
what a client really gets. Requests are documented from the models that
validate them (protocol/*), except /tokenize and /detokenize, which
api/tokens.py checks by hand and which are described here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Closed(BaseModel):
    """An object with exactly these fields (nothing undocumented leaves rotor)."""

    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    """An object that may grow fields (usage counters)."""

    model_config = ConfigDict(extra="allow")


StopReason = Annotated[
    int | str | None,
    Field(description="the stop string or the user's stop token id that ended the choice"),
]

# -- errors ------------------------------------------------------------------------------


class OpenAIErrorDetail(_Closed):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, ...")
    param: str | None = Field(description="the request field at fault, where there is one")
    code: int = Field(description="the HTTP status")


class OpenAIError(_Closed):
    """OpenAI's error envelope: every error of /v1/* (but /v1/messages), /tokenize, /detokenize."""

    error: OpenAIErrorDetail


class AnthropicErrorDetail(_Closed):
    type: str = Field(description="invalid_request_error, authentication_error, ...")
    message: str


class AnthropicError(_Closed):
    """Anthropic's error envelope: /v1/messages*, and any /v1/ request sent with
    an `anthropic-version` header."""

    type: Literal["error"]
    error: AnthropicErrorDetail


# -- OpenAI: chat completions ---------------------------------------------------------------


class PromptTokensDetails(_Closed):
    cached_tokens: int = Field(description="prompt tokens served from the engine's prefix cache")


class Usage(_Closed):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class TopLogprob(_Closed):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(_Closed):
    token: str
    logprob: float
    bytes: list[int] = Field(description="the token's own bytes (part of a character for some)")
    top_logprobs: list[TopLogprob]


class ChatLogprobs(_Closed):
    content: list[TokenLogprob] | None


class FunctionCall(_Closed):
    name: str
    arguments: str = Field(description="the arguments as JSON text")


class ToolCall(_Closed):
    id: str
    type: Literal["function"]
    function: FunctionCall


_REASONING = (
    "The reasoning text is under the name `--reasoning-field` gives "
    "(default `reasoning_content`); no other field is added."
)


class ChatMessage(BaseModel):
    __doc__ = "The answer of one choice. " + _REASONING
    model_config = ConfigDict(
        extra="allow", json_schema_extra={"additionalProperties": {"type": "string"}}
    )

    role: Literal["assistant"]
    content: str | None = Field(description="null when the answer is only tool calls")
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(_Closed):
    index: int
    message: ChatMessage
    logprobs: ChatLogprobs | None
    finish_reason: str | None = Field(description="stop, length or tool_calls")
    stop_reason: StopReason
    token_ids: list[int] | None = Field(default=None, description="with return_token_ids")


class PromptLogprob(_Closed):
    logprob: float
    rank: int | None
    decoded_token: str | None


# vLLM's prompt_logprobs: null for the first prompt token, then per token its id
# (as a string) and its likeliest alternatives'
PromptLogprobs = list[dict[str, PromptLogprob] | None]


class ChatCompletion(_Closed):
    """The non-streaming answer of /v1/chat/completions."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    prompt_token_ids: list[int] | None = Field(default=None, description="with return_token_ids")
    prompt_logprobs: PromptLogprobs | None = Field(default=None, description="with prompt_logprobs")


class ToolCallDelta(_Closed):
    index: int = Field(description="the call's place among the choice's calls")
    id: str
    type: Literal["function"]
    function: FunctionCall


class ChatDelta(BaseModel):
    __doc__ = "What one chunk adds to a choice. " + _REASONING
    model_config = ConfigDict(
        extra="allow", json_schema_extra={"additionalProperties": {"type": "string"}}
    )

    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(_Closed):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None
    finish_reason: str | None
    stop_reason: StopReason = None


class ChatCompletionChunk(_Closed):
    """One `data:` event of a streaming /v1/chat/completions; the stream ends with `data: [DONE]`."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice] = Field(description="empty in the closing usage chunk")
    usage: Usage | None = Field(
        default=None,
        description="with stream_options.include_usage (closing chunk) or continuous_usage_stats",
    )


# -- OpenAI: completions ----------------------------------------------------------------------


class CompletionLogprobs(_Closed):
    """With echo the prompt's tokens come first, the very first one's logprob
    and alternatives null."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(_Closed):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: str | None = Field(description="stop or length")
    stop_reason: StopReason = None
    prompt_token_ids: list[int] | None = Field(default=None, description="with return_token_ids")
    token_ids: list[int] | None = Field(default=None, description="with return_token_ids")
    prompt_logprobs: PromptLogprobs | None = Field(default=None, description="with prompt_logprobs")


class Completion(_Closed):
    """The non-streaming answer of /v1/completions."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class CompletionChunk(_Closed):
    """One `data:` event of a streaming /v1/completions; the stream ends with `data: [DONE]`."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


# -- embeddings ---------------------------------------------------------------------------------


class Embedding(_Closed):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str = Field(
        description="numbers, or with encoding_format base64 the little-endian float32s in base64"
    )


class EmbeddingUsage(_Closed):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(_Closed):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


# -- scores and rerank -------------------------------------------------------------------------


class Score(_Closed):
    index: int = Field(description="the pair's place: the index of its text on the second side")
    object: Literal["score"]
    score: float


class ScoreUsage(_Closed):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int


class ScoreList(_Closed):
    id: str
    object: Literal["list"]
    created: int
    model: str
    data: list[Score]
    usage: ScoreUsage


class RerankDocument(_Closed):
    text: str


class RerankResult(_Closed):
    index: int = Field(description="the document's index in the request")
    document: RerankDocument | None = Field(
        default=None, description="the document (absent with return_documents false)"
    )
    relevance_score: float


class RerankUsage(_Closed):
    prompt_tokens: int
    total_tokens: int


class RerankResponse(_Closed):
    id: str
    model: str
    usage: RerankUsage
    results: list[RerankResult] = Field(description="best first; the first top_n when given")


# -- models -------------------------------------------------------------------------------------


class ModelEntry(_Closed):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    root: str = Field(
        description="the model's canonical name: its aliases (--served-model-name) share it; "
        "a LoRA adapter's: its directory"
    )
    parent: str | None = Field(description="a LoRA adapter: the model it adapts; else null")
    task: Literal["generate", "embed", "score"] = Field(
        description="generate: chat and completions; embed: /v1/embeddings, /v1/score and "
        "/v1/rerank (by cosine); score: a cross-encoder, /v1/score and /v1/rerank only"
    )
    embedding_dim: int | None = Field(
        default=None, description="an embedding model: the dimension of its vectors"
    )
    max_model_len: int = Field(description="the context length")
    pools: dict[str, list[str]] | None = Field(
        default=None,
        description="a model served by workers: its live workers by pool (decode: agg and "
        "decode workers; prefill: prefill workers)",
    )


class ModelList(_Closed):
    object: Literal["list"]
    data: list[ModelEntry]


# -- LoRA adapters --------------------------------------------------------------------------------


class Lora(_Closed):
    id: str = Field(description="its name: the `model` its requests use")
    object: Literal["lora"]
    path: str = Field(description="the directory it was loaded from")
    parent: str = Field(description="the model it adapts")


class LoraList(_Closed):
    object: Literal["list"]
    data: list[Lora]


class LoraDeleted(_Closed):
    id: str
    object: Literal["lora"]
    deleted: Literal[True]


class AnthropicModel(_Closed):
    """A model in Anthropic's shape: the answer when `anthropic-version` is sent."""

    type: Literal["model"]
    id: str
    display_name: str
    created_at: str
    max_input_tokens: int


class AnthropicModelList(_Closed):
    """The model list in Anthropic's shape: the answer when `anthropic-version` is sent."""

    data: list[AnthropicModel]
    has_more: bool
    first_id: str | None
    last_id: str | None


# -- Anthropic: messages ----------------------------------------------------------------------


class TextContent(_Closed):
    type: Literal["text"]
    text: str


class ThinkingContent(_Closed):
    type: Literal["thinking"]
    thinking: str
    signature: str


class ToolUseContent(_Closed):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class MessageUsage(_Open):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class Message(_Closed):
    """The non-streaming answer of /v1/messages."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[
        Annotated[TextContent | ThinkingContent | ToolUseContent, Field(discriminator="type")]
    ]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None
    stop_sequence: str | None
    usage: MessageUsage


class TokenCount(_Closed):
    """The answer of /v1/messages/count_tokens: the prompt's tokens as /v1/messages counts them."""

    input_tokens: int


# -- OpenAI: responses ------------------------------------------------------------------------


class OutputTextPart(_Closed):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    logprobs: list[Any]


class ReasoningTextPart(_Closed):
    type: Literal["reasoning_text"]
    text: str


class OutputMessage(_Closed):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    status: Literal["in_progress", "completed", "incomplete"]
    content: list[OutputTextPart]


class OutputReasoning(_Closed):
    id: str
    type: Literal["reasoning"]
    summary: list[Any]
    content: list[ReasoningTextPart]
    status: Literal["in_progress", "completed", "incomplete"]


class OutputFunctionCall(_Closed):
    id: str
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str = Field(description="the arguments as JSON text")
    status: Literal["in_progress", "completed", "incomplete"]


class ResponseUsage(_Open):
    input_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


class ResponseError(_Closed):
    code: str
    message: str


class IncompleteDetails(_Closed):
    reason: str = Field(description="max_output_tokens")


class ReasoningSettings(_Closed):
    effort: str | None
    summary: str | None


class ResponseObject(_Closed):
    """The non-streaming answer of /v1/responses, and a stored response (GET
    /v1/responses/{id}, its cancel)."""

    id: str
    object: Literal["response"]
    created_at: int
    model: str
    status: Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    output: list[
        Annotated[OutputMessage | OutputReasoning | OutputFunctionCall, Field(discriminator="type")]
    ]
    usage: ResponseUsage | None
    instructions: str | None
    max_output_tokens: int | None
    parallel_tool_calls: bool
    previous_response_id: str | None
    reasoning: ReasoningSettings
    store: bool
    background: bool
    temperature: float
    text: dict[str, Any]
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    top_p: float
    truncation: str
    user: str | None
    metadata: dict[str, str]


class ResponseDeleted(_Closed):
    id: str
    object: Literal["response"]
    deleted: Literal[True]


class ResponseItemList(_Closed):
    """A page of a stored response's input items: the conversation it
    continued (earlier turns' input and output), then its own input."""

    object: Literal["list"]
    data: list[dict[str, Any]] = Field(
        description="items as input takes them (message, function_call, "
        "function_call_output, reasoning), each with its id"
    )
    first_id: str | None
    last_id: str | None
    has_more: bool


# -- tokens -------------------------------------------------------------------------------------


class TokenizeRequest(BaseModel):
    """Either `prompt` (text, tokenized as is) or `messages` (the chat prompt,
    rendered exactly as /v1/chat/completions renders it). Other fields are not
    read."""

    model_config = ConfigDict(
        json_schema_extra={"anyOf": [{"required": ["prompt"]}, {"required": ["messages"]}]}
    )

    model: str | None = None
    prompt: str | None = None
    add_special_tokens: bool = Field(default=True, description="with prompt")
    messages: list[dict[str, Any]] | None = Field(
        default=None, description="chat messages, as /v1/chat/completions takes them"
    )
    add_generation_prompt: bool = Field(default=True, description="with messages")
    tools: list[dict[str, Any]] | None = Field(default=None, description="with messages")
    tool_choice: str | dict[str, Any] | None = Field(default=None, description="with messages")
    chat_template_kwargs: dict[str, Any] | None = Field(default=None, description="with messages")


class TokenizeResponse(_Closed):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeRequest(BaseModel):
    """Token ids of the model's vocabulary; special tokens are kept in the text."""

    model: str | None = None
    tokens: list[int]


class DetokenizeResponse(_Closed):
    prompt: str


# -- operations -----------------------------------------------------------------------------------


class Health(BaseModel):
    """200 with status ok; 503 with the same body while starting or degraded."""

    status: Literal["ok", "starting", "degraded"]
    models: list[str] = Field(description="the models that something serves")
    engines: dict[str, dict[str, Any]] = Field(description="each model's engine state")
    workers: dict[str, Any] | None = Field(default=None, description="remote workers, per model")
    pools: dict[str, dict[str, list[str]]] | None = Field(
        default=None, description="per model, its live workers' ids by pool (decode, prefill)"
    )
    unhealthy: dict[str, list[str]] | None = Field(
        default=None,
        description="per model, the ids of serving workers not routed to: their engine "
        "failed its canary",
    )
    down: list[str] | None = Field(default=None, description="models nothing serves now")


class Live(_Closed):
    status: Literal["live"]
