"""Request fields that OpenAI or vLLM accept and rotor cannot apply.

Real clients send them (the SDKs, LangChain, aiperf), so they must not be a
400; rotor accepts them, does nothing with them, and says so in a debug log
line. A field no API knows stays a 400 naming it (typos must not pass).
Each entry says why there is nothing to do.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("rotor.protocol")

# Fields of chat and completions alike.
COMMON: dict[str, str] = {
    "service_tier": "one tier: every request is served the same way",
    "prompt_cache_key": "prefix caching is automatic",
    "prompt_cache_retention": "prefix caching is automatic",
    "safety_identifier": "rotor keeps no per-user records",
    "spaces_between_special_tokens": "detokenization is exact",
    "add_special_tokens": "the template or tokenizer decides",
    "truncate_prompt_tokens": "a prompt over the context is a 400, never cut",
    "request_id": "x-request-id sets the id",
    "use_beam_search": "sampling only",
    "length_penalty": "sampling only (beam search)",
    "guided_decoding_backend": "the engine picks its backend",
    "guided_whitespace_pattern": "the engine's grammar decides whitespace",
    "return_tokens_as_token_ids": "logprobs name tokens by text",
    "kv_transfer_params": "no disaggregated serving here",
    "vllm_xargs": "no engine plugins",
}

# Chat only.
CHAT: dict[str, str] = {
    "modalities": "text only; audio output is refused",
    "prediction": "no speculative decoding from predicted outputs",
    "verbosity": "the model decides its length",
    "web_search_options": "no built-in tools",
    "mm_processor_kwargs": "no multimodal processor",
    "echo": "vLLM's chat echo: the answer is sent, not the prompt",
}

# Completions only.
COMPLETIONS: dict[str, str] = {}


def log_ignored(model: Any, names: dict[str, str]) -> None:
    """A debug line naming each ignored field the request set, and why."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    for name, why in names.items():
        if getattr(model, name, None) is not None:
            log.debug("request field %r accepted and ignored: %s", name, why)
