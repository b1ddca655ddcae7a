"""A chat request's prompt: the sandboxed template rendered over its messages."""

from __future__ import annotations

from typing import Any

from rotor.model.template import RESERVED, ChatTemplate, TemplateError
from rotor.pipeline.bounds import prompt_char_limit
from rotor.pipeline.errors import RequestError
from rotor.pipeline.served import ServedModel
from rotor.protocol.openai import ChatCompletionRequest


def request_template(model: ServedModel, source: str) -> ChatTemplate:
    """A request's own `chat_template`, in the same sandbox as the model's and
    with its special tokens (compiled once per distinct source)."""
    card = model.card
    try:
        return ChatTemplate(
            source,
            bos_token=card.bos_token,
            eos_token=card.eos_token,
            unk_token=card.unk_token,
            pad_token=card.pad_token,
        )
    except TemplateError as e:
        raise RequestError(str(e), "chat_template") from None


def render_chat(
    model: ServedModel,
    req: ChatCompletionRequest,
    tools_active: bool,
    messages: list[dict[str, Any]] | None = None,
) -> str:
    """The prompt's text; `messages` in place of the request's (its images as
    the template sees them: `template_messages`)."""
    if req.chat_template is not None:
        template: ChatTemplate | None = request_template(model, req.chat_template)
    else:
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
            req.messages if messages is None else messages,
            tools=req.tools if tools_active else None,
            add_generation_prompt=req.add_generation_prompt and not req.continue_final_message,
            continue_final_message=req.continue_final_message,
            max_chars=prompt_char_limit(model),
            documents=req.documents,
            **kwargs,
        )
    except TemplateError as e:
        raise RequestError(str(e), "chat_template" if req.chat_template else "messages") from None


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with each image part as Hugging Face processors give it
    to a chat template, `{"type": "image"}`: a VLM's template renders its
    placeholder for it (pipeline/expand.py expands that)."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") == "image_url" for p in content
        ):
            parts = [
                {"type": "image"} if isinstance(p, dict) and p.get("type") == "image_url" else p
                for p in content
            ]
            m = {**m, "content": parts}
        out.append(m)
    return out


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


def thinking_disabled(kwargs: dict[str, Any] | None) -> bool:
    """`enable_thinking: false` / `thinking: false` in chat_template_kwargs."""
    if not kwargs:
        return False
    return kwargs.get("enable_thinking") is False or kwargs.get("thinking") is False
