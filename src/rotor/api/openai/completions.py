"""Internal events → `text_completion` chunks (the legacy completions API),
and the collected choices → one response (`completion_body`)."""

from __future__ import annotations

from typing import Any

from rotor.api.openai.base import OpenAIShaper
from rotor.api.openai.logprobs import LegacyLogprobs, PromptAsk, TokenText, listed
from rotor.api.openai.usage import usage
from rotor.frontend import StartedResponse
from rotor.pipeline.collected import Collected
from rotor.pipeline.decode import End
from rotor.pipeline.events import ChoiceEvent
from rotor.pipeline.parse.base import Content
from rotor.protocol.engine import PromptLogprob, TokenLogprob


class CompletionShaper(OpenAIShaper):
    """`echo` (one text per prompt) is put before each choice's first text,
    and with `logprobs` the prompt's logprobs before its first tokens', as
    vLLM's do (`ask.echo`); with `return_token_ids` each chunk carries its
    ids, and each choice's first chunk its prompt's (`prompt_token_ids`).
    Each choice's `text_offset` goes on from chunk to chunk."""

    __slots__ = ("_echo", "_prompt_ids", "_ask", "_offsets")

    def __init__(
        self,
        resp: StartedResponse,
        include_usage: bool = False,
        continuous_usage: bool = False,
        echo: list[str] | None = None,
        n: int = 1,
        token_ids: bool = False,
        ask: PromptAsk | None = None,
    ) -> None:
        super().__init__(resp, "text_completion", include_usage, continuous_usage)
        self._echo = echo_by_choice(echo, n)
        # the choices whose prompt ids are still to send (`return_token_ids`)
        self._prompt_ids: set[int] | None = set(range(resp.n)) if token_ids else None
        self._ask = ask or PromptAsk()
        self._offsets = [0] * resp.n  # where each choice's next token's text starts

    def frames(self, event: ChoiceEvent) -> bytes | None:
        """Text with no logprobs, no token ids, no finish and no echo still
        to put first (nearly every token): its chunk from the template."""
        if (
            event.finished is not None
            or self._resp.token_text is not None
            or event.token_ids is not None
        ):
            return None
        if self._echo is not None and event.index in self._echo:
            return None
        text = "".join([p.text for p in event.pieces if type(p) is Content])
        if not text:
            return None
        return self._text_frame(event.index, text)

    def _text_choice(self, key: int, text: str) -> dict[str, Any]:
        return {"index": key, "text": text, "logprobs": None, "finish_reason": None}

    def event(self, event: ChoiceEvent) -> list[dict[str, Any]]:
        text = "".join(p.text for p in event.pieces if type(p) is Content)
        if self._echo is not None:
            text = self._echo.pop(event.index, "") + text
        finished = event.finished
        if finished is not None and finished.end is End.CANCELLED:
            return []
        if not text and finished is None:
            return []
        c: dict[str, Any] = {
            "index": event.index,
            "text": text,
            "logprobs": self._logprobs(event),
            "finish_reason": finished.finish_reason if finished else None,
        }
        if finished is not None:
            c["stop_reason"] = finished.stop_reason
        if self._prompt_ids is not None:
            if event.index in self._prompt_ids:
                self._prompt_ids.discard(event.index)
                c["prompt_token_ids"] = self._resp.prompt_token_ids(event.index)
            c["token_ids"] = event.token_ids or []
        return [self._chunk(c)]

    def _logprobs(self, event: ChoiceEvent) -> dict[str, Any] | None:
        tt = self._resp.token_text
        if tt is None or not self._ask.answer:
            return None
        i = event.index
        lps = LegacyLogprobs(tt, self._offsets[i])
        top = self._ask.echo
        if top is not None and event.prompt_logprobs is not None:
            lps.prompt(self._resp.prompt_token_ids(i)[0], event.prompt_logprobs, top)
        lps.answer(event.logprobs)
        self._offsets[i] = lps.end
        return lps.body()


def completion_body(
    resp: StartedResponse,
    choices: list[Collected],
    echo: list[str] | None = None,
    n: int = 1,
    token_ids: bool = False,
    ask: PromptAsk | None = None,
) -> dict[str, Any]:
    """The collected choices as one `text_completion`; with `token_ids`
    (`return_token_ids`) each choice carries its ids and its prompt's; the
    prompt's logprobs as `ask` says (before the answer's logprobs with echo,
    and as `prompt_logprobs`, where vLLM puts them)."""
    prefix = echo_by_choice(echo, n) or {}
    ask = ask or PromptAsk()
    tt = resp.token_text
    u = resp.usage
    out = []
    for i, c in enumerate(choices):
        logprobs = None
        if tt is not None and ask.answer:
            first = resp.prompt_token_ids(i)[0] if ask.echo is not None else 0
            logprobs = completion_logprobs(c.logprobs, tt, ask.echo, first, c.prompt_logprobs)
        choice: dict[str, Any] = {
            "index": i,
            "text": prefix.get(i, "") + c.text(),
            "logprobs": logprobs,
            "finish_reason": c.finish_reason,
            "stop_reason": c.stop_reason,
        }
        if ask.listed is not None and tt is not None:
            choice["prompt_logprobs"] = listed(c.prompt_logprobs, ask.listed, tt)
        if token_ids:
            choice["token_ids"] = c.token_ids
            choice["prompt_token_ids"] = resp.prompt_token_ids(i)
        out.append(choice)
    return {
        "id": resp.id,
        "object": "text_completion",
        "created": resp.created,
        "model": resp.model,
        "choices": out,
        "usage": usage(u.prompt_tokens, u.completion_tokens, u.cached_tokens),
    }


def echo_by_choice(echo: list[str] | None, n: int) -> dict[int, str] | None:
    """`echo` (one text per prompt) for each choice index (n per prompt)."""
    return {i: echo[i // n] for i in range(len(echo) * n)} if echo else None


def completion_logprobs(
    lps: list[TokenLogprob],
    tt: TokenText,
    echo: int | None = None,
    first: int = 0,
    prompt: list[PromptLogprob] | None = None,
) -> dict[str, Any]:
    """A whole choice's legacy logprobs: with `echo` (the alternatives per
    prompt token), the prompt's (`first`: its first token id) before the answer's."""
    out = LegacyLogprobs(tt)
    if echo is not None and prompt is not None:
        out.prompt(first, prompt, echo)
    out.answer(lps)
    return out.body()
