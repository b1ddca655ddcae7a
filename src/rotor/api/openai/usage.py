"""OpenAI's `usage` object, and the logprob entries, shaped once for both APIs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rotor.protocol.engine import TokenLogprob

TokenText = Callable[[int], str]


def usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def chat_logprob(lp: TokenLogprob, token_text: TokenText) -> dict[str, Any]:
    text = token_text(lp.token_id)
    return {
        "token": text,
        "logprob": lp.logprob,
        "bytes": list(text.encode()),
        "top_logprobs": [
            {"token": (t := token_text(tid)), "logprob": v, "bytes": list(t.encode())}
            for tid, v in lp.top
        ],
    }
