"""Message pieces → OpenAI chunks, and `aggregate()`: the fold of those chunks
into one response. A non-streaming response is always that fold, never a
second code path. Chunks are built from an allow-list of fields: nothing
internal (End kind, retained EOS text) can reach a client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.decode import End
from rotor.pipeline.generate import Usage
from rotor.pipeline.parse.base import Content, Piece, Reasoning, ToolCall
from rotor.protocol.engine import TokenLogprob

TokenText = Callable[[int], str]


class RequestFailed(Exception):
    """A choice ended in ERROR (engine failure, strict parse failure): HTTP 500
    before the first chunk, an SSE error event after it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


def _lp_entry(lp: TokenLogprob, token_text: TokenText) -> dict[str, Any]:
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


class ChatChunker:
    """Shapes one response's events into `chat.completion.chunk` dicts."""

    __slots__ = (
        "_head",
        "_reasoning_field",
        "_usage",
        "_continuous",
        "_calls",
        "_token_text",
        "_lp_sent",
        "_choices",
    )

    def __init__(
        self,
        response_id: str,
        model: str,
        created: int,
        usage: Usage,
        choices: list[ChoicePipeline],
        reasoning_field: str = "reasoning_content",
        continuous_usage: bool = False,
        token_text: TokenText | None = None,
    ) -> None:
        self._head = {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }
        self._reasoning_field = reasoning_field
        self._usage = usage
        self._continuous = continuous_usage
        self._calls: dict[int, int] = {}
        self._token_text = token_text
        self._lp_sent: dict[int, int] = {}
        self._choices = choices

    def start(self, indices: range) -> list[dict[str, Any]]:
        """The opening chunk of each choice (`role`, empty content), as OpenAI
        sends it; after it, any failure is an SSE error event, not a status."""
        return [
            self.chunk(
                {
                    "index": i,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            )
            for i in indices
        ]

    def chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        out = {**self._head, "choices": [choice]}
        if self._continuous:
            out["usage"] = self._running_usage()
        return out

    def _running_usage(self) -> dict[str, Any]:
        done = sum(c.decoder.tokens for c in self._choices)
        u = self._usage
        return {
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": done,
            "total_tokens": u.prompt_tokens + done,
        }

    def events(
        self, index: int, choice: ChoicePipeline, pieces: list[Piece]
    ) -> list[dict[str, Any]]:
        """Chunks for these pieces, then the finishing chunk when the choice ended.

        Raises RequestFailed when the choice ended in an error."""
        out: list[dict[str, Any]] = []
        finished = choice.finished
        logprobs = None
        if self._token_text is not None and (pieces or finished is not None):
            logprobs = self._logprobs(index, choice)
        for piece in pieces:
            delta: dict[str, Any]
            if type(piece) is Content:
                delta = {"content": piece.text}
            elif type(piece) is Reasoning:
                delta = {self._reasoning_field: piece.text}
            elif type(piece) is ToolCall:
                k = self._calls.get(index, 0)
                self._calls[index] = k + 1
                delta = {
                    "tool_calls": [
                        {
                            "index": k,
                            "id": piece.id,
                            "type": "function",
                            "function": {"name": piece.name, "arguments": piece.arguments},
                        }
                    ]
                }
            else:  # pragma: no cover - Piece is closed
                continue
            out.append(
                self.chunk(
                    {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}
                )
            )
            logprobs = None
        if finished is not None:
            if finished.end is End.ERROR:
                raise RequestFailed(finished.error or "engine error")
            if finished.end is End.CANCELLED:
                return out
            out.append(
                self.chunk(
                    {
                        "index": index,
                        "delta": {},
                        "logprobs": logprobs,
                        "finish_reason": finished.finish_reason,
                        "stop_reason": finished.stop_reason,
                    }
                )
            )
        return out

    def _logprobs(self, index: int, choice: ChoicePipeline) -> dict[str, Any] | None:
        lps = choice.logprobs
        sent = self._lp_sent.get(index, 0)
        if len(lps) <= sent:
            return None
        self._lp_sent[index] = len(lps)
        assert self._token_text is not None
        return {"content": [_lp_entry(lp, self._token_text) for lp in lps[sent:]]}

    def usage_chunk(self) -> dict[str, Any]:
        return {**self._head, "choices": [], "usage": self._usage.as_openai()}


def delta_pieces(delta: dict[str, Any], reasoning_field: str) -> list[Piece]:
    """The generated pieces in one chat chunk's delta, as `ChatChunker` wrote
    them (the opening `role` chunk and finishing chunks have none). The APIs
    built on chat (and the terminal inputs) read chunks through this."""
    out: list[Piece] = []
    reasoning = delta.get(reasoning_field)
    if reasoning:
        out.append(Reasoning(reasoning))
    content = delta.get("content")
    if content:
        out.append(Content(content))
    for call in delta.get("tool_calls") or ():
        fn = call["function"]
        out.append(ToolCall(fn["name"], fn["arguments"], call["id"]))
    return out


def aggregate_chat(chunks: list[dict[str, Any]], n: int, usage: Usage) -> dict[str, Any]:
    """Fold chat chunks into one `chat.completion`."""
    first = chunks[0] if chunks else {}
    content: list[list[str]] = [[] for _ in range(n)]
    reasoning: dict[int, list[str]] = {}
    calls: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    logprobs: list[list[dict[str, Any]] | None] = [None] * n
    finish: list[str | None] = [None] * n
    stop_reason: list[Any] = [None] * n
    reasoning_key = "reasoning_content"
    for chunk in chunks:
        for c in chunk["choices"]:
            i = c["index"]
            delta = c["delta"]
            for key, value in delta.items():
                if key == "content":
                    content[i].append(value)
                elif key == "tool_calls":
                    for call in value:
                        calls[i].append({k: call[k] for k in ("id", "type", "function")})
                elif key != "role":
                    reasoning_key = key
                    reasoning.setdefault(i, []).append(value)
            if c.get("logprobs"):
                logprobs[i] = (logprobs[i] or []) + c["logprobs"]["content"]
            if c.get("finish_reason") is not None:
                finish[i] = c["finish_reason"]
                stop_reason[i] = c.get("stop_reason")
    choices = []
    for i in range(n):
        text = "".join(content[i])
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if (not text and calls[i]) else text,
        }
        if i in reasoning:
            message[reasoning_key] = "".join(reasoning[i])
        if calls[i]:
            message["tool_calls"] = calls[i]
        choices.append(
            {
                "index": i,
                "message": message,
                "logprobs": {"content": logprobs[i]} if logprobs[i] is not None else None,
                "finish_reason": finish[i],
                "stop_reason": stop_reason[i],
            }
        )
    return {
        "id": first.get("id"),
        "object": "chat.completion",
        "created": first.get("created"),
        "model": first.get("model"),
        "choices": choices,
        "usage": usage.as_openai(),
    }


class CompletionChunker:
    """Shapes events into `text_completion` chunks (the legacy completions API)."""

    __slots__ = ("_head", "_usage", "_continuous", "_token_text", "_lp_sent", "_choices")

    def __init__(
        self,
        response_id: str,
        model: str,
        created: int,
        usage: Usage,
        choices: list[ChoicePipeline],
        continuous_usage: bool = False,
        token_text: TokenText | None = None,
    ) -> None:
        self._head = {
            "id": response_id,
            "object": "text_completion",
            "created": created,
            "model": model,
        }
        self._usage = usage
        self._continuous = continuous_usage
        self._token_text = token_text
        self._lp_sent: dict[int, int] = {}
        self._choices = choices

    def events(
        self, index: int, choice: ChoicePipeline, pieces: list[Piece]
    ) -> list[dict[str, Any]]:
        text = "".join(p.text for p in pieces if type(p) is Content)
        finished = choice.finished
        if finished is not None and finished.end is End.ERROR:
            raise RequestFailed(finished.error or "engine error")
        if finished is not None and finished.end is End.CANCELLED:
            return []
        if not text and finished is None:
            return []
        c: dict[str, Any] = {
            "index": index,
            "text": text,
            "logprobs": self._logprobs(index, choice),
            "finish_reason": finished.finish_reason if finished else None,
        }
        if finished is not None:
            c["stop_reason"] = finished.stop_reason
        out = {**self._head, "choices": [c]}
        if self._continuous:
            done = sum(ch.decoder.tokens for ch in self._choices)
            out["usage"] = {
                "prompt_tokens": self._usage.prompt_tokens,
                "completion_tokens": done,
                "total_tokens": self._usage.prompt_tokens + done,
            }
        return [out]

    def _logprobs(self, index: int, choice: ChoicePipeline) -> dict[str, Any] | None:
        if self._token_text is None:
            return None
        lps = choice.logprobs
        sent = self._lp_sent.get(index, 0)
        self._lp_sent[index] = len(lps)
        new = lps[sent:]
        tt = self._token_text
        return {
            "tokens": [tt(lp.token_id) for lp in new],
            "token_logprobs": [lp.logprob for lp in new],
            "top_logprobs": [{tt(t): v for t, v in lp.top} for lp in new],
        }

    def usage_chunk(self) -> dict[str, Any]:
        return {**self._head, "choices": [], "usage": self._usage.as_openai()}


def aggregate_completion(chunks: list[dict[str, Any]], n: int, usage: Usage) -> dict[str, Any]:
    first = chunks[0] if chunks else {}
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
    return {
        "id": first.get("id"),
        "object": "text_completion",
        "created": first.get("created"),
        "model": first.get("model"),
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
        "usage": usage.as_openai(),
    }
