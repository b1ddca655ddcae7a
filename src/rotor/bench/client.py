"""One timed streaming request per API: chat, completions, messages, responses.

Each API is a body builder and an event reader. The reader marks the events
that carry generated output (text, reasoning or tool-call deltas) and takes the
token counts from the server's own usage: `stream_options.include_usage` for
chat and completions, `message_start`/`message_delta` for Anthropic Messages,
the final response's usage for Responses. Nothing is re-tokenized here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson

from rotor.bench.apis import PATHS
from rotor.bench.http import Connections, HTTPError


def tool_specs(n: int) -> list[dict[str, Any]]:
    """`n` plausible function tools (name, description, JSON schema)."""
    kinds = ("weather", "time", "stock", "flight", "recipe", "translate", "search", "convert")
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        out.append(
            {
                "name": f"get_{kind}_{i}",
                "description": f"Look up the {kind} for the given query",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": f"what {kind} to look up"},
                        "limit": {"type": "integer", "minimum": 1},
                    },
                    "required": ["query"],
                },
            }
        )
    return out


def _text(messages: list[dict[str, Any]]) -> str:
    return "\n\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))


def _data_url(url: str) -> tuple[str, str]:
    """'data:image/png;base64,AAAA' → ('image/png', 'AAAA')."""
    head, _, data = url.partition(",")
    return head.removeprefix("data:").removesuffix(";base64"), data


def _anthropic(content: Any) -> Any:
    """Chat parts as Anthropic blocks: an image_url's data: URL as a base64 image."""
    if isinstance(content, str):
        return content
    out = []
    for part in content:
        if part["type"] == "image_url":
            media_type, data = _data_url(part["image_url"]["url"])
            source = {"type": "base64", "media_type": media_type, "data": data}
            out.append({"type": "image", "source": source})
        else:
            out.append(part)
    return out


def _responses(content: Any) -> Any:
    """Chat parts as Responses input parts (input_image, input_text)."""
    if isinstance(content, str):
        return content
    return [
        {"type": "input_image", "image_url": part["image_url"]["url"]}
        if part["type"] == "image_url"
        else {"type": "input_text", "text": part["text"]}
        for part in content
    ]


def build_body(
    api: str,
    model: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
    ignore_eos: bool,
    tools: list[dict[str, Any]],
) -> dict[str, Any]:
    """The streaming request body for `api`; `messages` are chat-shaped."""
    body: dict[str, Any] = {"model": model, "stream": True}
    if api in ("chat", "completions"):
        if api == "chat":
            body["messages"] = messages
        else:
            body["prompt"] = _text(messages)
        body["max_tokens"] = max_tokens
        body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = [{"type": "function", "function": t} for t in tools]
    elif api == "messages":
        system = [m["content"] for m in messages if m["role"] == "system"]
        if system:
            body["system"] = "\n\n".join(system)
        body["messages"] = [
            {**m, "content": _anthropic(m["content"])} for m in messages if m["role"] != "system"
        ]
        body["max_tokens"] = max_tokens
        if tools:
            body["tools"] = [
                {
                    "name": t["name"],
                    "description": t["description"],
                    "input_schema": t["parameters"],
                }
                for t in tools
            ]
    elif api == "responses":
        if len(messages) == 1 and isinstance(messages[0]["content"], str):
            body["input"] = messages[0]["content"]
        else:
            body["input"] = [
                {"role": m["role"], "content": _responses(m["content"])} for m in messages
            ]
        body["max_output_tokens"] = max_tokens
        if tools:
            body["tools"] = [{"type": "function", **t} for t in tools]
    else:
        raise ValueError(f"unknown endpoint {api!r}")
    if ignore_eos:
        body["ignore_eos"] = True
    return body


class StreamError(Exception):
    """An error event inside a 200 stream."""


class Measure:
    """The timings and usage of one request, filled from its events."""

    __slots__ = (
        "t0",
        "ttft",
        "last",
        "itl",
        "prompt_tokens",
        "output_tokens",
        "cached_tokens",
        "done",
        "text",
        "_buf",
        "_read",
    )

    def __init__(self, api: str) -> None:
        self.t0 = 0.0
        self.ttft: float | None = None
        self.last = 0.0
        self.itl: list[float] = []
        self.prompt_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.done = False
        self.text: list[str] = []
        self._buf = b""
        self._read: Callable[[Measure, dict[str, Any]], bool] = READERS[api]

    def token(self, now: float) -> None:
        if self.ttft is None:
            self.ttft = now - self.t0
        else:
            self.itl.append(now - self.last)
        self.last = now

    def on_body(self, piece: bytes) -> None:
        """SSE framing: events end at a blank line; only `data:` lines matter."""
        now = time.perf_counter()
        if self._buf:
            piece = self._buf + piece
        if b"\r" in piece:
            piece = piece.replace(b"\r\n", b"\n")
        events = piece.split(b"\n\n")
        self._buf = events.pop()
        for event in events:
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    self.done = True
                    continue
                try:
                    obj = orjson.loads(data)
                except orjson.JSONDecodeError:
                    raise StreamError(f"event is not JSON: {data[:200]!r}") from None
                if self._read(self, obj):
                    self.token(now)


def _openai_usage(m: Measure, obj: dict[str, Any]) -> None:
    usage = obj.get("usage")
    if usage:
        m.prompt_tokens = usage.get("prompt_tokens")
        m.output_tokens = usage.get("completion_tokens")
        m.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


def _error(obj: dict[str, Any]) -> None:
    err = obj.get("error")
    if err is not None:
        msg = err.get("message", err) if isinstance(err, dict) else err
        raise StreamError(str(msg))


def read_chat(m: Measure, obj: dict[str, Any]) -> bool:
    _error(obj)
    got = False
    for choice in obj.get("choices") or ():
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if content:
            m.text.append(content)
            got = True
        elif delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls"):
            got = True
    _openai_usage(m, obj)
    return got


def read_completions(m: Measure, obj: dict[str, Any]) -> bool:
    _error(obj)
    got = False
    for choice in obj.get("choices") or ():
        text = choice.get("text")
        if text:
            m.text.append(text)
            got = True
    _openai_usage(m, obj)
    return got


def read_messages(m: Measure, obj: dict[str, Any]) -> bool:
    kind = obj.get("type")
    if kind == "content_block_delta":
        delta = obj.get("delta") or {}
        if delta.get("type") == "text_delta":
            m.text.append(delta.get("text", ""))
        return True
    if kind in ("message_start", "message_delta"):
        usage = (obj.get("message") or {}).get("usage") if kind == "message_start" else None
        usage = usage or obj.get("usage")
        if usage:
            if "input_tokens" in usage:
                cached = usage.get("cache_read_input_tokens") or 0
                created = usage.get("cache_creation_input_tokens") or 0
                m.prompt_tokens = usage["input_tokens"] + cached + created
                m.cached_tokens = cached
            if kind == "message_delta":
                m.output_tokens = usage.get("output_tokens")
    elif kind == "message_stop":
        m.done = True
    elif kind == "error":
        _error(obj)
    return False


RESPONSE_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.refusal.delta",
    }
)


def read_responses(m: Measure, obj: dict[str, Any]) -> bool:
    kind = obj.get("type")
    if kind in RESPONSE_DELTAS:
        if kind == "response.output_text.delta":
            m.text.append(obj.get("delta", ""))
        return True
    if kind in ("response.completed", "response.incomplete"):
        usage = (obj.get("response") or {}).get("usage") or {}
        m.prompt_tokens = usage.get("input_tokens")
        m.output_tokens = usage.get("output_tokens")
        m.cached_tokens = (usage.get("input_tokens_details") or {}).get("cached_tokens")
        m.done = True
    elif kind == "response.failed":
        err = ((obj.get("response") or {}).get("error")) or {"message": "response.failed"}
        raise StreamError(str(err.get("message", err)))
    elif kind == "error":
        raise StreamError(str(obj.get("message") or obj.get("error") or obj))
    return False


READERS: dict[str, Callable[[Measure, dict[str, Any]], bool]] = {
    "chat": read_chat,
    "completions": read_completions,
    "messages": read_messages,
    "responses": read_responses,
}


def api_headers(api_key: str | None) -> dict[str, str]:
    """Both auth spellings (OpenAI's bearer, Anthropic's x-api-key) and the
    Anthropic version header: servers ignore the ones they do not use."""
    headers = {"anthropic-version": "2023-06-01"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
        headers["x-api-key"] = api_key
    return headers


class Client:
    """Sends one API's requests over keep-alive `Connections` to the server and times them."""

    def __init__(
        self,
        api: str,
        connections: Connections,
        model: str,
        ignore_eos: bool,
        tools: list[dict[str, Any]],
        timeout: float,
    ) -> None:
        self.api = api
        self.path = PATHS[api]
        self.connections = connections
        self.model = model
        self.ignore_eos = ignore_eos
        self.tools = tools
        self.timeout = timeout

    def body(self, messages: list[dict[str, Any]], max_tokens: int) -> bytes:
        return orjson.dumps(
            build_body(self.api, self.model, messages, max_tokens, self.ignore_eos, self.tools)
        )

    async def send(self, body: bytes, origin: float) -> tuple[dict[str, Any], str]:
        """One request → (its record for results.json, the answer's text)."""
        m = Measure(self.api)
        failure: list[bytes] = []
        error: dict[str, str] | None = None
        m.t0 = time.perf_counter()
        try:
            post = self.connections.post(self.path, body, m.on_body, failure.append)
            status = await asyncio.wait_for(post, self.timeout)
            if status != 200:
                text = b"".join(failure).decode(errors="replace")
                error = {"kind": f"http_{status}", "message": text[:500]}
            elif not m.done:
                error = {"kind": "incomplete", "message": "the stream ended before its last event"}
        except asyncio.TimeoutError:
            error = {"kind": "timeout", "message": f"no complete answer in {self.timeout} s"}
        except HTTPError as e:
            error = {"kind": e.kind, "message": str(e)}
        except StreamError as e:
            error = {"kind": "stream_error", "message": str(e)[:500]}
        e2e = time.perf_counter() - m.t0
        ttft = m.ttft
        if ttft is None and error is None:  # no visible output (e.g. only special tokens)
            ttft = e2e
        record = {
            "start_s": m.t0 - origin,
            "ttft_s": ttft,
            "e2e_s": e2e,
            "itl_s": m.itl,
            "prompt_tokens": m.prompt_tokens,
            "output_tokens": m.output_tokens,
            "cached_tokens": m.cached_tokens,
            "error": error,
        }
        return record, "".join(m.text)
