"""Internal events → `text_completion` chunks (the legacy completions API),
and their fold into one response."""

from __future__ import annotations

from typing import Any

from rotor.api.openai.base import OpenAIShaper
from rotor.api.openai.usage import usage
from rotor.frontend import Response
from rotor.pipeline.decode import End
from rotor.pipeline.events import ChoiceEvent
from rotor.pipeline.parse.base import Content


class CompletionShaper(OpenAIShaper):
    """`echo` (one text per prompt) is put before each choice's first text."""

    __slots__ = ("_echo", "_n")

    def __init__(
        self,
        resp: Response,
        include_usage: bool = False,
        continuous_usage: bool = False,
        echo: list[str] | None = None,
        n: int = 1,
    ) -> None:
        super().__init__(resp, "text_completion", include_usage, continuous_usage)
        self._echo: dict[int, str] | None = (
            {i: echo[i // n] for i in range(len(echo) * n)} if echo else None
        )
        self._n = n

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
        return [self._chunk(c)]

    def _logprobs(self, event: ChoiceEvent) -> dict[str, Any] | None:
        tt = self._resp.token_text
        if tt is None:
            return None
        new = event.logprobs
        return {
            "tokens": [tt(lp.token_id) for lp in new],
            "token_logprobs": [lp.logprob for lp in new],
            "top_logprobs": [{tt(t): v for t, v in lp.top} for lp in new],
        }


def fold_completion(chunks: list[dict[str, Any]], resp: Response) -> dict[str, Any]:
    n = resp.n
    texts: list[list[str]] = [[] for _ in range(n)]
    finish: list[str | None] = [None] * n
    stop_reason: list[Any] = [None] * n
    lps: list[dict[str, list[Any]] | None] = [None] * n
    for chunk in chunks:
        for c in chunk["choices"]:
            i = c["index"]
            texts[i].append(c["text"])
            if c.get("logprobs"):
                acc = lps[i] or {"tokens": [], "token_logprobs": [], "top_logprobs": []}
                for k in acc:
                    acc[k].extend(c["logprobs"][k])
                lps[i] = acc
            if c.get("finish_reason") is not None:
                finish[i] = c["finish_reason"]
                stop_reason[i] = c.get("stop_reason")
    u = resp.usage
    return {
        "id": resp.id,
        "object": "text_completion",
        "created": resp.created,
        "model": resp.model,
        "choices": [
            {
                "index": i,
                "text": "".join(texts[i]),
                "logprobs": lps[i],
                "finish_reason": finish[i],
                "stop_reason": stop_reason[i],
            }
            for i in range(n)
        ],
        "usage": usage(u.prompt_tokens, u.completion_tokens, u.cached_tokens),
    }
