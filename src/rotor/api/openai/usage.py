"""OpenAI's `usage` object, and the logprob entries, shaped once for both APIs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rotor.protocol.engine import TokenLogprob

TokenText = Callable[[int], str]
TokenBytes = Callable[[int], bytes]


def usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def chat_logprob(
    lp: TokenLogprob, token_text: TokenText, token_bytes: TokenBytes | None = None
) -> dict[str, Any]:
    """`bytes` are the token's own (part of a character for some tokens), not its text's."""
    raw = token_bytes or (lambda tid: token_text(tid).encode())
    return {
        "token": token_text(lp.token_id),
        "logprob": lp.logprob,
        "bytes": list(raw(lp.token_id)),
        "top_logprobs": [
            {"token": token_text(tid), "logprob": v, "bytes": list(raw(tid))} for tid, v in lp.top
        ],
    }
