"""Request → engine requests + one ChoicePipeline per choice.

Everything a request decides before the engine runs is decided here, from
its parts: the prompt (`prompt`), the tool plan (`tool_choice`, `tool_plan`),
what the engine is asked (`params`). A problem with the request is a
`RequestError` (→ 400 naming the field), raised before any engine work.

`n` fans out: every choice is an engine request of its own (`n=1`), as
vLLM's parallel sampling does, so a choice can be ended, aborted or resent to
another worker on its own. With a seed, choice i samples with `seed + i`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from rotor.media.decode import DecodedImage
from rotor.model.tokenizer import Tokenizer
from rotor.pipeline.bounds import check_prompt_size
from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.decode import ChoiceDecoder
from rotor.pipeline.embed import refuse_generation
from rotor.pipeline.errors import RequestError
from rotor.pipeline.expand import expand_images
from rotor.pipeline.mock_calls import markup_choices
from rotor.pipeline.params import engine_params, request_guided
from rotor.pipeline.parse.base import ReasoningParser, ToolParser, Tools
from rotor.pipeline.parse.message import MessageParser
from rotor.pipeline.parse.reasoning import reasoning_parser
from rotor.pipeline.parse.tools import tool_parser
from rotor.pipeline.prompt import (
    last_user_text,
    render_chat,
    template_messages,
    thinking_disabled,
)
from rotor.pipeline.served import ServedModel
from rotor.pipeline.tool_choice import ToolChoice, check_tool_choice
from rotor.pipeline.tool_plan import ToolPlan, plan_tools
from rotor.protocol.engine import EngineImage, EngineRequest, StopParams
from rotor.protocol.mock import MockScript, parse_mock
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest

# Prompts longer than this are prepared off the event loop.
LONG_PROMPT_CHARS = 4096
# The most choices one request may fan out to (prompts × n): each is an engine
# request and a pipeline of its own. OpenAI's own ceiling for `n`.
MAX_CHOICES = 128


@dataclass
class Prepared:
    """One prompt: an engine request and the frontend state of each of its choices."""

    requests: list[EngineRequest]  # one per choice
    choices: list[ChoicePipeline]
    prompt_tokens: int
    prompt_text: str | None = None
    first_index: int = 0  # completions with several prompts: choice index offset

    @property
    def token_ids(self) -> list[int]:
        return self.requests[0].token_ids


def new_request_id() -> str:
    return uuid.uuid4().hex


def prepare_chat(
    model: ServedModel,
    req: ChatCompletionRequest,
    request_id: str,
    images: list[DecodedImage] | None = None,
) -> Prepared:
    """The chat request as engine requests (one per choice) and their
    choices' pipelines; RequestError for what the request cannot ask.
    `images`: the request's, loaded (pipeline/images.py), in order."""
    refuse_generation(model)
    images = images or []
    # the template's view: an image part is {"type": "image"}, not its URL's characters
    messages = template_messages(req.messages) if images else req.messages
    check_prompt_size(model, "conversation (messages and tools)", "messages", messages, req.tools)
    tools = Tools.from_openai(req.tools)
    choice = check_tool_choice(req.tool_choice, tools)
    family = tool_parser(model.tool_parser) if model.tool_parser else None
    prompt = _chat_prompt(model, req, choice.active, messages, images)
    plan = plan_tools(model, family, tools, choice, request_guided(req), req.turn_grammar)
    reasoning = _Reasoning.of(model, req, family, prompt.text)
    tok = model.tokenizer
    skip_special = req.skip_special_tokens
    if skip_special is None:
        skip_special = not (family is not None and family.needs_special_tokens)
    visible = _visible_stops(tok, family) if choice.active else []
    sampling, stop, output = engine_params(
        model, req, prompt.tokens, plan.guided, visible, skip_special
    )
    base = EngineRequest(
        request_id=request_id,
        model=model.card.name,
        token_ids=prompt.token_ids,
        sampling=sampling,
        stop=stop,
        output=output,
        annotations=prompt.annotations,
        session_id=req.session_id,
        cache_salt=req.cache_salt,
        priority=req.priority,
        images=prompt.images,
    )
    # Reasoning tags that are special tokens reach the parser whatever
    # skip_special_tokens says (the parser strips them).
    keep_special = reasoning.special_ids(tok)
    retain = bool(plan.grammar_installed and family is not None and family.wants_eos_text)
    markup = _markup_choices(req, choice, tools, plan, family, reasoning)
    choices = []
    for i in range(req.n):
        parser = MessageParser(
            reasoning=reasoning.parser(),
            tools=family(tools) if family and markup[i] else plan.parser(),
            parallel_tool_calls=req.parallel_tool_calls,
        )
        decoder = _decoder(
            tok,
            stop,
            req.stop_strings,
            req.include_stop_str_in_output,
            skip_special,
            retain,
            keep_special,
        )
        choices.append(
            ChoicePipeline(
                i,
                decoder,
                parser,
                grammar_installed=plan.grammar_installed,
                named_tool=choice.mode == "named",
                keep_ids=bool(req.return_token_ids),
            )
        )
    return Prepared(_fan_out(base, req.n, req.mock), choices, prompt.tokens, prompt.text)


@dataclass
class _Prompt:
    """What the engine is given: token ids, or (no tokenizer: echo) the text to echo."""

    text: str | None  # the rendered chat prompt; None without a tokenizer
    token_ids: list[int]
    tokens: int  # prompt_tokens, as usage counts them
    annotations: dict[str, Any]
    images: list[EngineImage]


def _chat_prompt(
    model: ServedModel,
    req: ChatCompletionRequest,
    tools_active: bool,
    messages: list[dict[str, Any]],
    images: list[DecodedImage],
) -> _Prompt:
    tok = model.tokenizer
    if tok is None:
        echo_text = last_user_text(req.messages)
        return _Prompt(None, [], len(echo_text), {"echo_text": echo_text}, [])
    if not images:
        text = render_chat(model, req, tools_active)
        token_ids = tok.encode_chat(text)
        return _Prompt(text, token_ids, len(token_ids), {}, [])
    assert model.vision is not None, "images reach only a model that takes them"
    text = render_chat(model, req, tools_active, messages)
    token_ids, placed = expand_images(tok.encode_chat(text), model.vision, images)
    return _Prompt(text, token_ids, len(token_ids), {}, placed)


@dataclass
class _Reasoning:
    """The reasoning parser each choice gets (or none), and whether it starts
    inside the block (the rendered prompt opened it)."""

    cls: type[ReasoningParser] | None
    starts_inside: bool = False

    @classmethod
    def of(
        cls,
        model: ServedModel,
        req: ChatCompletionRequest,
        family: type[ToolParser] | None,
        prompt_text: str | None,
    ) -> _Reasoning:
        name = model.reasoning_parser
        if not name or thinking_disabled(req.chat_template_kwargs):
            return cls(None)
        if family is not None and family.handles_reasoning:
            return cls(None)
        parser = reasoning_parser(name)
        inside = prompt_text is not None and prompt_text.rstrip().endswith(parser.start_tag)
        return cls(parser, inside)

    def parser(self) -> ReasoningParser | None:
        return self.cls(self.starts_inside) if self.cls is not None else None

    def special_ids(self, tok: Tokenizer | None) -> frozenset[int]:
        if tok is None or self.cls is None:
            return frozenset()
        return tok.special_ids_in(self.cls.markers())


def _visible_stops(tok: Tokenizer | None, family: type[ToolParser] | None) -> list[int]:
    """The family's markers that end a turn and stay in the text (a tool-end
    token), as token ids."""
    if tok is None or family is None:
        return []
    ids = (tok.token_to_id(marker) for marker in family.visible_stop_markers)
    return [tid for tid in ids if tid is not None]


def _markup_choices(
    req: ChatCompletionRequest,
    choice: ToolChoice,
    tools: Tools,
    plan: ToolPlan,
    family: type[ToolParser] | None,
    reasoning: _Reasoning,
) -> list[bool]:
    """Per choice: its scripted answer (`mock`) is written in the family's
    markup under a constraint, so the family parses it."""
    if req.mock is None or choice.mode not in ("required", "named"):
        return [False] * req.n
    return markup_choices(
        _script(req.mock, req.n), req.n, choice, tools, plan.make_parser, family, reasoning.parser
    )


def prepare_completion(
    model: ServedModel, req: CompletionRequest, request_id: str
) -> list[Prepared]:
    """One Prepared per prompt; choice indices continue across prompts."""
    refuse_generation(model)
    card, tok = model.card, model.tokenizer
    prompts = req.prompts()
    if len(prompts) * req.n > MAX_CHOICES:
        raise RequestError(
            f"the request asks for {len(prompts)} prompt(s) × n={req.n} = "
            f"{len(prompts) * req.n} choices; at most {MAX_CHOICES} choices are allowed per request",
            "n" if req.n > 1 else "prompt",
        )
    guided = request_guided(req)
    skip_special = True if req.skip_special_tokens is None else req.skip_special_tokens
    prepared = []
    for p_index, prompt in enumerate(prompts):
        annotations: dict[str, Any] = {}
        if isinstance(prompt, str):
            if tok is None:
                annotations["echo_text"] = prompt
                token_ids: list[int] = []
                prompt_tokens = len(prompt)
            else:
                check_prompt_size(model, "prompt", "prompt", prompt)
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
        sampling, stop, output = engine_params(model, req, prompt_tokens, guided, [], skip_special)
        base = EngineRequest(
            request_id=f"{request_id}-{p_index}" if p_index else request_id,
            model=card.name,
            token_ids=token_ids,
            sampling=sampling,
            stop=stop,
            output=output,
            annotations=annotations,
            session_id=req.session_id,
            cache_salt=req.cache_salt,
            priority=req.priority,
        )
        # max_tokens 0 (echo: the prompt alone): the engine's one token is dropped
        kept = replace(stop, max_tokens=0) if req.max_tokens == 0 else stop
        choices = [
            ChoicePipeline(
                i,
                _decoder(
                    tok, kept, req.stop_strings, req.include_stop_str_in_output, skip_special, False
                ),
                MessageParser(),
                keep_ids=bool(req.return_token_ids),
            )
            for i in range(req.n)
        ]
        requests = _fan_out(base, req.n, req.mock)
        prepared.append(
            Prepared(requests, choices, prompt_tokens, None, first_index=p_index * req.n)
        )
    return prepared


def _fan_out(base: EngineRequest, n: int, mock: dict[str, Any] | None) -> list[EngineRequest]:
    """One engine request per choice: its own id, seed and (scripted) output."""
    script = _script(mock, n) if mock is not None else None
    requests = []
    for i in range(n):
        annotations = dict(base.annotations)
        if script is not None:
            annotations["mock"] = script.for_choice(i)
        sampling = base.sampling
        if i and sampling.seed is not None:
            sampling = replace(sampling, seed=sampling.seed + i)
        requests.append(
            replace(
                base,
                request_id=f"{base.request_id}_{i}" if i else base.request_id,
                sampling=sampling,
                annotations=annotations,
            )
        )
    return requests


def _script(mock: dict[str, Any], n: int) -> MockScript:
    try:
        return parse_mock(mock, n)
    except ValueError as e:
        raise RequestError(str(e), "mock") from None


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
