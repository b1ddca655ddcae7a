"""Request → EngineRequest + one ChoicePipeline per choice.

Everything a request decides before the engine runs lives here: the prompt
(chat template, tokens), the stop conditions, sampling, which parsers run,
which constraint goes to the engine. A problem with the request is a
`RequestError` (→ 400 naming the field), raised before any engine work.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rotor.model.card import ModelCard
from rotor.model.template import RESERVED, ChatTemplate, TemplateError
from rotor.model.tokenizer import Tokenizer
from rotor.pipeline import grammar
from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.decode import ChoiceDecoder
from rotor.pipeline.parse.base import ReasoningParser, ToolParser, Tools
from rotor.pipeline.parse.constrained import NamedToolParser, RequiredToolsParser
from rotor.pipeline.parse.message import MessageParser
from rotor.pipeline.parse.reasoning import reasoning_parser
from rotor.pipeline.parse.tools import tool_parser
from rotor.protocol.engine import (
    EngineRequest,
    OutputParams,
    SamplingParams,
    StopParams,
)
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest

# Prompts longer than this are tokenized off the event loop.
LONG_PROMPT_CHARS = 4096


class RequestError(ValueError):
    """A request that cannot run as given: HTTP 400 with this message."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


@dataclass
class ServedModel:
    """A card with what the frontend built from it: tokenizer, templates, parser choice."""

    card: ModelCard
    tokenizer: Tokenizer | None = None
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    templates: dict[str, ChatTemplate] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        card: ModelCard,
        tokenizer: Tokenizer | None,
        tool_parser_name: str | None = None,
        reasoning_parser_name: str | None = None,
    ) -> ServedModel:
        """Validates parser names (ValueError listing valid ones) and compiles templates."""
        tp = tool_parser_name or card.tool_call_parser
        rp = reasoning_parser_name or card.reasoning_parser
        if tp:
            tool_parser(tp)
        if rp:
            reasoning_parser(rp)
        templates = {
            name: ChatTemplate(
                src,
                bos_token=card.bos_token,
                eos_token=card.eos_token,
                unk_token=card.unk_token,
                pad_token=card.pad_token,
            )
            for name, src in card.chat_templates.items()
        }
        return cls(card, tokenizer, tp, rp, templates)

    def template(self, with_tools: bool) -> ChatTemplate | None:
        src = self.card.chat_template(with_tools)
        if src is None:
            return None
        for name, text in self.card.chat_templates.items():
            if text is src:
                return self.templates[name]
        return None


@dataclass
class Prepared:
    """One engine request and the frontend state of each of its choices."""

    request: EngineRequest
    choices: list[ChoicePipeline]
    prompt_tokens: int
    prompt_text: str | None = None
    first_index: int = 0  # completions with several prompts: choice index offset


def new_request_id() -> str:
    return uuid.uuid4().hex


# -- chat ---------------------------------------------------------------------------


def render_chat(model: ServedModel, req: ChatCompletionRequest, tools_active: bool) -> str:
    template = model.template(with_tools=bool(req.tools) and tools_active)
    if template is None:
        raise RequestError(f"model {model.card.name!r} has no chat template", "messages")
    kwargs = {
        k: v
        for k, v in (req.chat_template_kwargs or {}).items()
        if k not in RESERVED  # the request's own fields win
    }
    if req.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", req.reasoning_effort)
    try:
        return template.render(
            req.messages,
            tools=req.tools if tools_active else None,
            add_generation_prompt=req.add_generation_prompt and not req.continue_final_message,
            continue_final_message=req.continue_final_message,
            **kwargs,
        )
    except TemplateError as e:
        raise RequestError(str(e), "messages") from None


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return content_text(m.get("content"))
    return ""


def content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def check_tool_choice(req: ChatCompletionRequest, tools: Tools) -> tuple[str, str | None]:
    """(mode, named tool) after the consistency checks of tool-calling.md."""
    choice = req.tool_choice
    if choice is None:
        return ("auto" if tools else "none"), None
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise RequestError(
                f"tool_choice {choice!r} must be 'none', 'auto', 'required' or a named function",
                "tool_choice",
            )
        if choice == "required" and not tools:
            raise RequestError("tool_choice 'required' needs tools", "tool_choice")
        if choice == "auto" and not tools:
            return "none", None
        return choice, None
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if choice.get("type") != "function" or not isinstance(name, str):
        raise RequestError(
            "tool_choice must be {'type': 'function', 'function': {'name': ...}}", "tool_choice"
        )
    if name not in tools:
        raise RequestError(
            f"tool_choice names {name!r}, which is not among the tools", "tool_choice"
        )
    return "named", name


def prepare_chat(
    model: ServedModel, req: ChatCompletionRequest, request_id: str, prompt: str | None = None
) -> Prepared:
    """`prompt` may be given when already rendered (the API renders off the loop)."""
    card, tok = model.card, model.tokenizer
    tools = Tools.from_openai(req.tools)
    mode, named = check_tool_choice(req, tools)
    tools_active = mode != "none"
    family = tool_parser(model.tool_parser) if model.tool_parser else None

    annotations: dict[str, Any] = {}
    if tok is None:
        prompt_text = None
        echo_text = last_user_text(req.messages)
        annotations["echo_text"] = echo_text
        token_ids: list[int] = []
        prompt_tokens = len(echo_text)
    else:
        prompt_text = prompt if prompt is not None else render_chat(model, req, tools_active)
        token_ids = tok.encode(prompt_text)
        prompt_tokens = len(token_ids)

    plan = _plan_tools(model, req, family, tools, mode, named)
    guided, grammar_installed = plan.guided, plan.grammar_installed

    thinking_off = _thinking_disabled(req.chat_template_kwargs)
    reasoning_cls: type[ReasoningParser] | None = None
    if model.reasoning_parser and not thinking_off and not (family and family.handles_reasoning):
        reasoning_cls = reasoning_parser(model.reasoning_parser)
    starts_inside = bool(
        reasoning_cls is not None
        and prompt_text is not None
        and prompt_text.rstrip().endswith(reasoning_cls.start_tag)
    )

    visible: list[int] = []
    if tok is not None and family is not None and tools_active:
        for marker in family.visible_stop_markers:
            tid = tok.token_to_id(marker)
            if tid is not None:
                visible.append(tid)
    skip_special = req.skip_special_tokens
    if skip_special is None:
        skip_special = not (family is not None and family.needs_special_tokens)
    # Reasoning tags that are special tokens reach the parser whatever
    # skip_special_tokens says (the parser strips them).
    keep_special = (
        tok.special_ids_in(reasoning_cls.markers())
        if tok is not None and reasoning_cls is not None
        else frozenset()
    )

    sampling, stop, output = _common_params(
        model, req, prompt_tokens, req.output_limit(), guided, visible, skip_special
    )
    if req.logprobs:
        output.logprobs = True
        output.top_logprobs = req.top_logprobs or 0
    _check_engine_support(card, req, output, guided, grammar_installed)
    if req.mock is not None:
        annotations["mock"] = req.mock.model_dump()

    engine_request = EngineRequest(
        request_id=request_id,
        model=card.name,
        token_ids=token_ids,
        sampling=sampling,
        stop=stop,
        output=output,
        n=req.n,
        annotations=annotations,
    )
    retain = bool(grammar_installed and family is not None and family.wants_eos_text)
    choices = []
    for i in range(req.n):
        parser = MessageParser(
            reasoning=reasoning_cls(starts_inside) if reasoning_cls else None,
            tools=plan.make_parser() if plan.make_parser else None,
            parallel_tool_calls=req.parallel_tool_calls,
        )
        choices.append(
            ChoicePipeline(
                i,
                _decoder(
                    tok,
                    stop,
                    req.stop,
                    req.include_stop_str_in_output,
                    skip_special,
                    retain,
                    keep_special,
                ),
                parser,
                grammar_installed=grammar_installed,
                named_tool=mode == "named",
            )
        )
    return Prepared(engine_request, choices, prompt_tokens, prompt_text)


@dataclass
class _ToolPlan:
    """How a request's tools are handled: the parser each choice gets, and the
    constraint (if any) the engine decodes under."""

    make_parser: Callable[[], ToolParser] | None
    guided: dict[str, Any] | None
    grammar_installed: bool


def _plan_tools(
    model: ServedModel,
    req: ChatCompletionRequest,
    family: type[ToolParser] | None,
    tools: Tools,
    mode: str,
    named: str | None,
) -> _ToolPlan:
    """tool-calling.md's tool_choice table, and beam.md's turn grammar."""
    guided = _request_guided(req)
    accepts_constraints = model.card.capabilities.structural_tags
    tools_active = mode != "none"
    choice = _tool_choice_value(req)
    # harmony / beam frame their own output (channels, their own grammar): a
    # bare-JSON constraint would write something their parser cannot read.
    frames_output = family is not None and family.handles_reasoning
    make_parser: Callable[[], ToolParser] | None = None
    grammar_installed = False
    if tools_active and family is not None and family.name == "beam":
        if accepts_constraints and req.turn_grammar:
            guided = grammar.beam_turn_grammar(tools, choice)
            grammar_installed = True
    elif (
        accepts_constraints
        and not frames_output
        and (mode == "named" or (mode == "required" and family is not None))
    ):
        guided = grammar.tool_choice_guided(tools, choice) or guided
        # The output is what the constraint forced, not the family's markup.
        if mode == "named":
            make_parser = lambda: NamedToolParser(tools, named)  # type: ignore[arg-type]  # noqa: E731
        else:
            make_parser = lambda: RequiredToolsParser(tools)  # noqa: E731
    if make_parser is None and mode == "named" and not frames_output:
        make_parser = lambda: NamedToolParser(tools, named)  # type: ignore[arg-type]  # noqa: E731
    elif make_parser is None and family is not None and (frames_output or tools_active):
        # harmony/beam frame reasoning themselves: they run even without tools.
        active = tools if tools_active else Tools()
        make_parser = lambda: family(active)  # noqa: E731
    return _ToolPlan(make_parser, guided, grammar_installed)


def _tool_choice_value(req: ChatCompletionRequest) -> str | dict[str, Any]:
    return req.tool_choice if req.tool_choice is not None else "auto"


def _thinking_disabled(kwargs: dict[str, Any] | None) -> bool:
    if not kwargs:
        return False
    return kwargs.get("enable_thinking") is False or kwargs.get("thinking") is False


def _request_guided(req: ChatCompletionRequest) -> dict[str, Any] | None:
    guided = req.guided()
    fmt = req.response_format
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


# -- completions ----------------------------------------------------------------------


def prepare_completion(
    model: ServedModel, req: CompletionRequest, request_id: str
) -> list[Prepared]:
    """One Prepared per prompt; choice indices continue across prompts."""
    card, tok = model.card, model.tokenizer
    guided = req.guided()
    prepared = []
    for p_index, prompt in enumerate(req.prompts()):
        annotations: dict[str, Any] = {}
        if isinstance(prompt, str):
            if tok is None:
                annotations["echo_text"] = prompt
                token_ids: list[int] = []
                prompt_tokens = len(prompt)
            else:
                token_ids = tok.encode(prompt, add_special_tokens=True)
                prompt_tokens = len(token_ids)
        else:
            if tok is None:
                raise RequestError(
                    f"model {card.name!r} has no tokenizer: token-id prompts are not accepted",
                    "prompt",
                )
            if any(t < 0 or t >= tok.vocab_size for t in prompt):
                raise RequestError(f"prompt has token ids outside [0, {tok.vocab_size})", "prompt")
            token_ids = list(prompt)
            prompt_tokens = len(token_ids)
        if prompt_tokens == 0 and tok is not None:
            raise RequestError("prompt must not be empty", "prompt")
        skip_special = True if req.skip_special_tokens is None else req.skip_special_tokens
        sampling, stop, output = _common_params(
            model, req, prompt_tokens, req.output_limit(), guided, [], skip_special
        )
        if req.logprobs is not None:
            output.logprobs = True
            output.top_logprobs = req.logprobs
        _check_engine_support(card, req, output, guided, False)
        if req.mock is not None:
            annotations["mock"] = req.mock.model_dump()
        engine_request = EngineRequest(
            request_id=f"{request_id}-{p_index}" if p_index else request_id,
            model=card.name,
            token_ids=token_ids,
            sampling=sampling,
            stop=stop,
            output=output,
            n=req.n,
            annotations=annotations,
        )
        choices = [
            ChoicePipeline(
                i,
                _decoder(tok, stop, req.stop, req.include_stop_str_in_output, skip_special, False),
                MessageParser(),
            )
            for i in range(req.n)
        ]
        prepared.append(
            Prepared(engine_request, choices, prompt_tokens, None, first_index=p_index * req.n)
        )
    return prepared


# -- shared ---------------------------------------------------------------------------


def _common_params(
    model: ServedModel,
    req: ChatCompletionRequest | CompletionRequest,
    prompt_tokens: int,
    max_tokens: int | None,
    guided: dict[str, Any] | None,
    visible: list[int],
    skip_special: bool,
) -> tuple[SamplingParams, StopParams, OutputParams]:
    card = model.card
    context = card.context_length
    defaults = card.generation_defaults
    if max_tokens is None:
        max_tokens = context - prompt_tokens
        if max_tokens < 1:
            raise RequestError(
                f"the prompt is {prompt_tokens} tokens, which leaves no room in the model's "
                f"context length of {context} tokens",
                "messages" if isinstance(req, ChatCompletionRequest) else "prompt",
            )
    elif prompt_tokens + max_tokens > context:
        raise RequestError(
            f"this model's maximum context length is {context} tokens; the request has "
            f"{prompt_tokens} prompt tokens and asks for {max_tokens} completion tokens "
            f"({prompt_tokens + max_tokens} in all)",
            "max_tokens",
        )
    if req.min_tokens > max_tokens:
        raise RequestError(
            f"min_tokens ({req.min_tokens}) must not exceed max_tokens ({max_tokens})", "min_tokens"
        )
    stop_ids = list(req.stop_token_ids or [])
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
    )
    stop = StopParams(
        max_tokens=max_tokens,
        min_tokens=req.min_tokens,
        stop_token_ids=stop_ids,
        eos_token_ids=list(card.eos_token_ids),
        visible_stop_token_ids=visible,
        ignore_eos=req.ignore_eos,
    )
    return sampling, stop, OutputParams(skip_special_tokens=skip_special)


def _pick(value: Any, default: Any, fallback: Any) -> Any:
    if value is not None:
        return value
    return default if default is not None else fallback


def _check_engine_support(
    card: ModelCard,
    req: ChatCompletionRequest | CompletionRequest,
    output: OutputParams,
    guided: dict[str, Any] | None,
    grammar_installed: bool,
) -> None:
    caps = card.capabilities
    if output.logprobs and not caps.logprobs:
        raise RequestError(f"model {card.name!r} cannot return logprobs", "logprobs")
    explicit_guided = (
        req.guided_json is not None or req.guided_regex is not None or req.guided_choice is not None
    )
    if isinstance(req, ChatCompletionRequest) and req.response_format is not None:
        explicit_guided = explicit_guided or req.response_format.get("type") != "text"
    if explicit_guided and not caps.structural_tags:
        raise RequestError(
            f"model {card.name!r} is served by an engine that cannot enforce guided decoding",
            "guided_json",
        )
    if req.mock is not None and not caps.mock_scripts:
        raise RequestError(
            "the 'mock' field is honoured only by the mocker engine (out=mocker)", "mock"
        )


def _decoder(
    tok: Tokenizer | None,
    stop: StopParams,
    stop_strings: list[str] | None,
    include_stop: bool,
    skip_special: bool,
    retain_eos: bool,
    keep_special: frozenset[int] = frozenset(),
) -> ChoiceDecoder:
    if tok is None:
        return ChoiceDecoder(stop, stop_strings, include_stop)
    return ChoiceDecoder(
        stop,
        stop_strings,
        include_stop,
        decoder=tok.decoder(skip_special, keep_special),
        token_text=lambda ids: tok.decode(ids, skip_special_tokens=False),
        retain_eos_text=retain_eos,
    )
