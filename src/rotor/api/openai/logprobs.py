"""Logprobs in the shapes of the completions API and vLLM's extension:
the legacy `logprobs` of a choice (`tokens`, `token_logprobs`,
`top_logprobs`, `text_offset`), the echoed prompt's first (its first token's
logprob and alternatives `null`), and vLLM's `prompt_logprobs` (a list,
`null` for the first token, then per token a map from token id to its
logprob, rank and text).

Each prompt token's own entry comes first, then its likeliest alternatives
(at most `top`), as vLLM orders them; a logprob of -inf is sent as -9999.0,
as vLLM sends it (JSON has no infinity)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rotor.protocol.engine import PromptLogprob, TokenLogprob
from rotor.protocol.openai import ChatCompletionRequest, CompletionRequest

FLOOR = -9999.0

TokenText = Callable[[int], str]


@dataclass(frozen=True, slots=True)
class PromptAsk:
    """What a response shows of the prompt's logprobs: `echo`, the legacy
    logprobs of the echoed prompt with that many alternatives (completions
    with `echo` and `logprobs`); `listed`, vLLM's `prompt_logprobs` with that
    many (not streamed); None: not shown. `answer`: the choices' own
    `logprobs` are shown (the request asked for them, not only for the
    prompt's)."""

    echo: int | None = None
    listed: int | None = None
    answer: bool = True

    @classmethod
    def of(cls, req: ChatCompletionRequest | CompletionRequest) -> PromptAsk:
        listed = None if req.stream else req.prompt_logprobs
        if isinstance(req, ChatCompletionRequest):
            return cls(None, listed, req.logprobs)
        echo = req.logprobs if req.echo else None
        return cls(echo, listed, req.logprobs is not None)


def finite(logprob: float) -> float:
    return logprob if logprob > FLOOR else FLOOR


def listed(entries: list[PromptLogprob] | None, top: int, tt: TokenText) -> list[Any] | None:
    """vLLM's `prompt_logprobs`: None for the first prompt token, then one
    map per token (None when the engine sent none: a choice that failed)."""
    if entries is None:
        return None
    out: list[Any] = [None]
    for lp in entries:
        position = {
            str(lp.token_id): {
                "logprob": finite(lp.logprob),
                "rank": lp.rank,
                "decoded_token": tt(lp.token_id),
            }
        }
        for rank, (tid, value) in enumerate(lp.top[:top], 1):
            key = str(tid)
            if key not in position:
                position[key] = {"logprob": finite(value), "rank": rank, "decoded_token": tt(tid)}
        out.append(position)
    return out


class LegacyLogprobs:
    """The legacy completions `logprobs` of one choice, built in order: the
    echoed prompt's (when asked), then its tokens'; `text_offset` counts the
    characters of the tokens before each from where it started (0 at the
    prompt's start with echo, else at the answer's), and a stream's next
    chunk goes on from where the last one ended."""

    __slots__ = ("tokens", "token_logprobs", "top_logprobs", "text_offset", "_tt", "_at")

    def __init__(self, tt: TokenText, at: int = 0) -> None:
        self.tokens: list[str] = []
        self.token_logprobs: list[float | None] = []
        self.top_logprobs: list[dict[str, float] | None] = []
        self.text_offset: list[int] = []
        self._tt = tt
        self._at = at

    @property
    def end(self) -> int:
        """Where the next token's text starts."""
        return self._at

    def _token(self, token_id: int) -> None:
        text = self._tt(token_id)
        self.tokens.append(text)
        self.text_offset.append(self._at)
        self._at += len(text)

    def prompt(self, first: int, entries: list[PromptLogprob], top: int) -> None:
        """The echoed prompt: its first token (no logprob), then each token's
        logprob and top map (the token itself and its `top` likeliest)."""
        self._token(first)
        self.token_logprobs.append(None)
        self.top_logprobs.append(None)
        tt = self._tt
        for lp in entries:
            self._token(lp.token_id)
            value = finite(lp.logprob)
            self.token_logprobs.append(value)
            alternatives = {tt(lp.token_id): value}
            for tid, v in lp.top[:top]:
                alternatives.setdefault(tt(tid), finite(v))
            self.top_logprobs.append(alternatives)

    def answer(self, lps: list[TokenLogprob]) -> None:
        """Generated tokens: each one's logprob, and its top map (the token
        itself first, then the alternatives the engine gave: up to logprobs +
        1 entries, as OpenAI says)."""
        tt = self._tt
        for lp in lps:
            self._token(lp.token_id)
            value = finite(lp.logprob)
            self.token_logprobs.append(value)
            alternatives = {tt(lp.token_id): value}
            for tid, v in lp.top:
                alternatives.setdefault(tt(tid), finite(v))
            self.top_logprobs.append(alternatives)

    def body(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        }
