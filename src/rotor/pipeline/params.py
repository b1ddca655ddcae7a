"""What a request asks of the engine, in the token contract's terms: the
context check, sampling (request, else the model's generation defaults),
stop conditions, the request's own decoding constraint, and the checks
against what the card says its engine can do."""

from __future__ import annotations

from typing import Any

from rotor.pipeline.errors import RequestError
from rotor.pipeline.served import ServedModel
from rotor.protocol.engine import OutputParams, SamplingParams, StopParams
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest

Request = ChatCompletionRequest | CompletionRequest


def engine_params(
    model: ServedModel,
    req: Request,
    prompt_tokens: int,
    guided: dict[str, Any] | None,
    visible: list[int],
    skip_special: bool,
) -> tuple[SamplingParams, StopParams, OutputParams]:
    card = model.card
    context = card.context_length
    defaults = card.generation_defaults
    max_tokens = req.output_limit()
    if max_tokens is None:
        # as vLLM: the room left in the context, capped by the model's own
        # generation_config `max_new_tokens` when it has one
        max_tokens = context - prompt_tokens
        cap = defaults.get("max_new_tokens")
        if cap is not None and 0 < cap < max_tokens:
            max_tokens = cap
        elif max_tokens < 1:
            raise RequestError(
                f"the prompt is {prompt_tokens} tokens, which leaves no room in the model's "
                f"context length of {context} tokens",
                "messages" if isinstance(req, ChatCompletionRequest) else "prompt",
            )
    elif prompt_tokens + max(max_tokens, 1) > context:  # (0: the engine makes one)
        raise RequestError(
            f"this model's maximum context length is {context} tokens; the request has "
            f"{prompt_tokens} prompt tokens and asks for {max_tokens} completion tokens "
            f"({prompt_tokens + max_tokens} in all)",
            "max_tokens",
        )
    bias = req.bias_map()
    vocab = model.tokenizer.vocab_size if model.tokenizer is not None else None
    if bias and vocab is not None and any(t >= vocab for t in bias):
        raise RequestError(f"logit_bias has token ids outside [0, {vocab})", "logit_bias")
    if req.min_tokens > max_tokens:
        raise RequestError(
            f"min_tokens ({req.min_tokens}) must not exceed max_tokens ({max_tokens})", "min_tokens"
        )
    sampling = SamplingParams(
        temperature=_pick(req.temperature, defaults.get("temperature"), 1.0),
        top_p=_pick(req.top_p, defaults.get("top_p"), 1.0),
        top_k=_pick(req.top_k, defaults.get("top_k"), -1),
        min_p=_pick(req.min_p, defaults.get("min_p"), 0.0),
        seed=req.seed,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        repetition_penalty=_pick(req.repetition_penalty, defaults.get("repetition_penalty"), 1.0),
        guided=guided,
        logit_bias=bias,
    )
    stop = StopParams(
        # max_tokens 0 (completions with echo: the prompt alone): the engine
        # makes one token, as vLLM's does, and the choice's decoder drops it
        max_tokens=max(max_tokens, 1),
        min_tokens=req.min_tokens,
        stop_token_ids=list(req.stop_token_ids or []),
        eos_token_ids=list(card.eos_token_ids),
        visible_stop_token_ids=visible,
        ignore_eos=req.ignore_eos,
    )
    output = OutputParams(skip_special_tokens=skip_special)
    top = _logprobs(req)
    if top is not None:
        output.logprobs = True
        output.top_logprobs = top
    output.prompt_logprobs = req.prompt_logprobs_wanted()
    _check_capabilities(model, req, output)
    return sampling, stop, output


def _logprobs(req: Request) -> int | None:
    """How many top alternatives per token the request wants; None: no logprobs."""
    if isinstance(req, ChatCompletionRequest):
        return (req.top_logprobs or 0) if req.logprobs else None
    return req.logprobs


def _pick(value: Any, default: Any, fallback: Any) -> Any:
    if value is not None:
        return value
    return default if default is not None else fallback


def request_guided(req: Request) -> dict[str, Any] | None:
    """The decoding constraint the request itself asks for (guided_*, response_format)."""
    guided = req.guided()
    fmt = req.response_format if isinstance(req, ChatCompletionRequest) else None
    if fmt is not None:
        kind = fmt.get("type")
        if kind == "json_schema":
            schema = (fmt.get("json_schema") or {}).get("schema")
            if not isinstance(schema, dict):
                raise RequestError(
                    "response_format.json_schema.schema is required", "response_format"
                )
            guided = {"type": "json_schema", "json_schema": schema}
        elif kind == "json_object":
            guided = {"type": "json_schema", "json_schema": {"type": "object"}}
        elif kind != "text":
            raise RequestError(f"response_format type {kind!r} is not supported", "response_format")
    return guided


def check_priority(model: ServedModel, priority: int) -> None:
    """A nonzero `priority` to a model whose engine schedules first come,
    first served is a 400 naming it (vLLM's rule: 0 is every request's
    default, so it always passes). The frontend checks it before a request
    waits for admission, and again with the rest of the request's checks."""
    if priority != 0 and not model.card.capabilities.priority_scheduling:
        raise RequestError(
            f"priority {priority}: model {model.card.name!r} is served by an engine that "
            "schedules first come, first served; start it with --scheduling-policy priority",
            "priority",
        )


def _check_capabilities(model: ServedModel, req: Request, output: OutputParams) -> None:
    """What the request asks of its engine, against the card's capabilities: a
    400 naming the field before any engine work, local or remote."""
    card = model.card
    caps = card.capabilities
    if output.logprobs and not caps.logprobs:
        raise RequestError(f"model {card.name!r} cannot return logprobs", "logprobs")
    if output.prompt_logprobs is not None and not caps.prompt_logprobs:
        field = "prompt_logprobs" if req.prompt_logprobs is not None else "echo"
        raise RequestError(
            f"model {card.name!r} is served by an engine that cannot return the prompt's "
            f"logprobs ({'prompt_logprobs' if field == 'prompt_logprobs' else 'echo with logprobs'})",
            field,
        )
    explicit_guided = req.guided() is not None
    if isinstance(req, ChatCompletionRequest) and req.response_format is not None:
        explicit_guided = explicit_guided or req.response_format.get("type") != "text"
    if explicit_guided and not caps.structural_tags:
        raise RequestError(
            f"model {card.name!r} is served by an engine that cannot enforce guided decoding",
            "guided_json",
        )
    check_priority(model, req.priority)
    if req.mock is not None and not caps.mock_scripts:
        raise RequestError(
            "the 'mock' field is honoured only by the mocker engine (out=mocker)", "mock"
        )
