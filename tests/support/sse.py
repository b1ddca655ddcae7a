"""Server-sent event bodies, read the way a client reads them.

`data_events`: an OpenAI stream (`data: {...}` events, `data: [DONE]` last).
`named_events`: an Anthropic Messages or OpenAI Responses stream (`event: NAME`
and `data: {...}` per event, NAME being the data's `type`).
Both take the body text, or a response (read whole here, streamed or not).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

DONE = "[DONE]"


def _body(source: str | httpx.Response) -> str:
    if isinstance(source, str):
        return source
    return source.read().decode("utf-8")


def _blocks(text: str) -> list[str]:
    """The events of an SSE body: blocks of lines ended by a blank line."""
    assert text.endswith("\n\n"), f"the stream does not end an event: {text[-200:]!r}"
    return [block for block in text.split("\n\n") if block]


def data_events(source: str | httpx.Response) -> list[Any]:
    """The parsed `data:` payloads of an OpenAI stream, in order, without the
    final `[DONE]` (which must come last, once)."""
    payloads: list[str] = []
    for block in _blocks(_body(source)):
        assert block.startswith("data: ") and "\n" not in block, f"not one data line: {block!r}"
        payloads.append(block[len("data: ") :])
    assert payloads and payloads[-1] == DONE, (
        f"the stream does not end with [DONE]: {payloads[-1:]}"
    )
    assert payloads.count(DONE) == 1, "data after [DONE]"
    return [json.loads(p) for p in payloads[:-1]]


def named_events(source: str | httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """(event name, parsed data) per event of an Anthropic / Responses stream;
    each event's name is its data's `type`."""
    events: list[tuple[str, dict[str, Any]]] = []
    for block in _blocks(_body(source)):
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        assert set(fields) == {"event", "data"}, f"not an event/data pair: {block!r}"
        data = json.loads(fields["data"])
        assert data["type"] == fields["event"], block
        events.append((fields["event"], data))
    return events


def live_chunks(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """An OpenAI stream's chunks as they arrive (a streamed response, read
    line by line), none of them an error."""
    for line in response.iter_lines():
        if line.startswith("data: {"):
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            yield chunk
